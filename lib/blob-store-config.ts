// The configured blob store (blobs.uri; default <state_dir>/blobs): every process of a stack opens
// it through here, so the rollout worker, the CLI and the run plan agree on one store.
import type { TempoConfig } from '../config/schema.js';
import {
  blobStoreUri,
  LocalBlobStore,
  openBlobStore,
  parseBlobStoreUri,
  type BlobStore,
  type BlobStoreLocation,
  type ConditionalBlobStore,
} from '../stores/blobstore.js';
import { stateLayout } from '../stores/layout.js';

/** The canonical URI of the configured store (file:///… or s3://…). */
export function configuredBlobStoreUri(cfg: Pick<TempoConfig, 'state_dir' | 'blobs'>): string {
  return blobStoreUri(parseBlobStoreUri(cfg.blobs?.uri || stateLayout(cfg.state_dir).blobs));
}

export function openConfiguredBlobStore(
  cfg: Pick<TempoConfig, 'state_dir' | 'blobs'>,
  env?: NodeJS.ProcessEnv,
): Promise<ConditionalBlobStore> {
  return openBlobStore(configuredBlobStoreUri(cfg), { env });
}

/** Releases an S3 store's connections (a local store holds none). */
export function closeBlobStore(store: BlobStore): void {
  (store as { close?: () => void }).close?.();
}

/** Whether two store URIs name the same store (Node and Python spell file: URLs differently). */
export function sameBlobStore(a: string, b: string): boolean {
  return sameLocation(parseBlobStoreUri(a), parseBlobStoreUri(b));
}

function sameLocation(a: BlobStoreLocation, b: BlobStoreLocation): boolean {
  if (a.kind === 'local' && b.kind === 'local') return a.root === b.root;
  return a.kind === 's3' && b.kind === 's3' && a.bucket === b.bucket && a.prefix === b.prefix;
}

/** The file of a stored image, for what hands images on as paths (SFT JSONL exports); an S3 store
 *  has no such file, so it is refused naming the setting. */
export function localBlobPath(store: BlobStore, ref: string, what: string): string {
  if (store instanceof LocalBlobStore) return store.pathOf(ref);
  throw new Error(
    `${what} writes images as local file paths, which blobs.uri=${store.uri} (not a local store) cannot give; ` +
      'use a local blobs.uri (or leave it empty) for this command',
  );
}
