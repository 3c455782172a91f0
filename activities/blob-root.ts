// Work meant for another stack's blob store is refused: a sample written into this worker's store
// would be "not found" by the trainer, which reads the run's. Retryable (another worker of the run's
// queue may reach that store), and logged as an error. The error type is the one the trainer raises
// for the same mistake (BlobRootUnreachable).
import { ApplicationFailure } from '@temporalio/common';
import type { BlobStore } from '../stores/blobstore.js';
import { sameBlobStore } from '../lib/blob-store-config.js';
import { childLogger } from '../base/log.js';
import type { RunBlobStore } from '../protocol/activities.js';

const log = childLogger('blob-store');
export const BLOB_ROOT_UNREACHABLE = 'BlobRootUnreachable';

/** `work` names the task in the error. Locations are compared parsed, not as strings. */
export function refuseForeignBlobStore(store: BlobStore, given: RunBlobStore, work: string): void {
  const uri = given.blob_store;
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
