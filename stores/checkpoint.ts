// A checkpoint committed in a remote blob store (workers/trainer/stores/checkpoints.py): its location is
// `<store URI>/named/runs/<run>/checkpoints/step-<N>`, its commit record COMMIT.json names each file
// under the winning attempt's prefix with its size and SHA-256. The TypeScript side reads it to export
// a model directory (the warm start) when the run's store is s3://.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { BlobError, type BlobStore } from './blobstore.js';

const LOCATION = /^(?<store>.+)\/named\/(?<key>runs\/[^/]+\/(?:checkpoints|weights)\/step-\d{6,})$/;

export const CommitRecord = z
  .object({
    attempt: z.string(),
    prefix: z.string(),
    files: z.record(z.string(), z.number().int().nonnegative()),
    digests: z.record(z.string(), z.string()).default({}),
    pruned: z.boolean().optional(),
  })
  .passthrough();
export type CommitRecord = z.infer<typeof CommitRecord>;

/** The store URI and named key of a stored checkpoint's location; null for anything else (a directory). */
export function parseCheckpointLocation(text: string): { store: string; key: string } | null {
  const m = LOCATION.exec(text);
  return m ? { store: m.groups!.store!, key: m.groups!.key! } : null;
}

export async function readCommitRecord(store: BlobStore, key: string): Promise<CommitRecord> {
  const ref = store.namedRef(`${key}/COMMIT.json`);
  const parsed = CommitRecord.safeParse(await store.getJson(ref));
  if (!parsed.success) throw new BlobError(`${store.uri} ${ref} is not a commit record: ${parsed.error.message}`);
  return parsed.data;
}

/** The files of a committed checkpoint whose names `keep` accepts, into `dir` (created), each checked
 *  against the record's size and digest. */
export async function downloadCheckpoint(
  store: BlobStore,
  key: string,
  dir: string,
  keep: (name: string) => boolean,
): Promise<CommitRecord> {
  const record = await readCommitRecord(store, key);
  if (record.pruned) throw new BlobError(`${store.uri} ${key}: its weights were pruned (run.keep_checkpoints)`);
  await fs.mkdir(dir, { recursive: true });
  for (const [name, size] of Object.entries(record.files)) {
    if (!keep(name)) continue;
    const bytes = await store.getBytes(store.namedRef(`${record.prefix}/${name}`));
    const digest = createHash('sha256').update(bytes).digest('hex');
    if (bytes.length !== size || (record.digests[name] !== undefined && record.digests[name] !== digest))
      throw new BlobError(
        `${store.uri} ${record.prefix}/${name} does not match its commit record (size ${bytes.length}, recorded ${size})`,
      );
    await fs.mkdir(path.dirname(path.join(dir, name)), { recursive: true });
    await fs.writeFile(path.join(dir, name), bytes);
  }
  return record;
}
