// Claim-check blob store. Large things (token arrays, images, samples, checkpoints) live here and
// activities pass references; Temporal payloads carry only small facts.
//
// A reference is "blob:" + a relative path under the store's root:
//   blob:cas/<2 hex>/<sha256>.<ext>   content-addressed bytes (an image used by 8 samples is stored once)
//   blob:named/<key>                  named JSON documents (samples, metrics), written atomically
// The Python trainer resolves the same references against the same root (workers/trainer/blobs.py).
import { createHash, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';

export const BLOB_PREFIX = 'blob:';

export class BlobError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BlobError';
  }
}

/** Writes a file under a temporary name and renames it: readers never see half a file. */
export async function writeFileAtomic(file: string, data: Uint8Array | string): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  await fs.writeFile(tmp, data);
  await fs.rename(tmp, file);
}

export class LocalBlobStore {
  constructor(readonly root: string) {}

  /** The file behind a reference; refuses anything that would leave the root. */
  pathOf(ref: string): string {
    if (!ref.startsWith(BLOB_PREFIX)) throw new BlobError(`not a blob reference: ${JSON.stringify(ref)}`);
    const rel = ref.slice(BLOB_PREFIX.length);
    const full = path.resolve(this.root, rel);
    if (rel.includes('\0') || path.isAbsolute(rel) || !full.startsWith(path.resolve(this.root) + path.sep))
      throw new BlobError(`blob reference escapes the store: ${JSON.stringify(ref)}`);
    return full;
  }

  async putBytes(data: Uint8Array, ext = 'bin'): Promise<string> {
    const digest = createHash('sha256').update(data).digest('hex');
    const ref = `${BLOB_PREFIX}cas/${digest.slice(0, 2)}/${digest}.${ext}`;
    const file = this.pathOf(ref);
    try {
      await fs.access(file);
    } catch {
      await writeFileAtomic(file, data);
    }
    return ref;
  }

  async putJson(key: string, value: unknown): Promise<string> {
    const ref = `${BLOB_PREFIX}named/${key}`;
    await writeFileAtomic(this.pathOf(ref), JSON.stringify(value));
    return ref;
  }

  async getBytes(ref: string): Promise<Buffer> {
    try {
      return await fs.readFile(this.pathOf(ref));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobError(`blob not found: ${ref}`);
      throw err;
    }
  }

  async getJson<T = unknown>(ref: string): Promise<T> {
    const bytes = await this.getBytes(ref);
    try {
      return JSON.parse(bytes.toString('utf8')) as T;
    } catch (err) {
      throw new BlobError(`blob ${ref} is not valid JSON: ${(err as Error).message}`);
    }
  }

  async exists(ref: string): Promise<boolean> {
    try {
      await fs.access(this.pathOf(ref));
      return true;
    } catch {
      return false;
    }
  }

  namedRef(key: string): string {
    return `${BLOB_PREFIX}named/${key}`;
  }
}
