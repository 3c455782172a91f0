// Work meant for another stack's blob store is refused: a sample written into this worker's store
// would be "not found" by the trainer, which reads the run's. Retryable (another worker of the run's
// queue may reach that store), and logged as an error.
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { LocalBlobStore } from '../lib/blobstore.js';
import { childLogger } from '../lib/log.js';

const log = childLogger('blob-root');
export const BLOB_ROOT_UNREACHABLE = 'BlobRootUnreachable';

/** `given`: the run's blob root (absent in histories recorded before the work carried it); `work`
 *  names the task in the error. */
export function refuseForeignBlobRoot(store: LocalBlobStore, given: string | undefined, work: string): void {
  if (given === undefined || path.resolve(given) === path.resolve(store.root)) return;
  const message =
    `${work}: given blob root ${given}, but this rollout worker's blob root is ${store.root}: the task reached a worker ` +
    'of another stack (give each stack its own temporal.task_queues: the default)';
  log.error({ work, given, own: store.root }, message);
  throw ApplicationFailure.retryable(message, BLOB_ROOT_UNREACHABLE);
}
