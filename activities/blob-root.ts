// Work meant for another stack's blob store is refused: a sample written into this worker's store
// would be "not found" by the trainer, which reads the run's. Retryable (another worker of the run's
// queue may reach that store), and logged as an error.
import { ApplicationFailure } from '@temporalio/common';
import type { BlobStore } from '../lib/blobstore.js';
import { sameBlobStore } from '../lib/blob-store-config.js';
import { childLogger } from '../lib/log.js';

const log = childLogger('blob-root');
export const BLOB_ROOT_UNREACHABLE = 'BlobRootUnreachable';

/** Where a task says its run's store is: `blob_store` (a store URI), or `blob_root` (a directory) in
 *  histories recorded before the store was configurable; neither in those before either. */
export interface RunBlobStore {
  blob_store?: string;
  blob_root?: string;
}

/** `work` names the task in the error. Locations are compared parsed, not as strings. */
export function refuseForeignBlobRoot(store: BlobStore, given: RunBlobStore, work: string): void {
  const uri = given.blob_store ?? given.blob_root;
  if (uri === undefined) return;
  let same: boolean;
  try {
    same = sameBlobStore(uri, store.uri);
  } catch {
    same = false; // a URI this worker cannot parse is not its store
  }
  if (same) return;
  const message =
    `${work}: given blob store ${uri}, but this rollout worker's blob store is ${store.uri}: the task reached a worker ` +
    'of another stack (give each stack its own temporal.task_queues: the default)';
  log.error({ work, given: uri, own: store.uri }, message);
  throw ApplicationFailure.retryable(message, BLOB_ROOT_UNREACHABLE);
}
