// Claim-check blob store. Large things (token arrays, images, samples, checkpoints) live here and
// activities pass references; Temporal payloads carry only small facts.
//
// A reference is "blob:" + a relative path under the store's root:
//   blob:cas/<2 hex>/<sha256>.<ext>   content-addressed bytes (an image used by 8 samples is stored once)
//   blob:named/<key>                  named JSON documents (samples, metrics), written atomically
// The Python trainer resolves the same references against the same root (workers/tempo_common/blobs.py).
//
// Two stores behind one interface (BlobStore), chosen by a store URI (openBlobStore):
//   a path or file:///path          LocalBlobStore: files under that directory (local or shared filesystem)
//   s3://bucket[/prefix]            S3BlobStore (stores/blobstore-s3.ts): objects <prefix>/<ref's path>,
//                                   any S3-compatible endpoint, the standard AWS_* variables
// A reference means the same in both: the same bytes give the same `blob:cas/…` ref in either store.
import { createHash, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { z } from 'zod';
import { BLOB_FILE, readBoundedBytesAsync, type UnreadableFile } from '../base/bounded-file.js';
import { parseUserPath, virtualFilesystemOf } from '../base/out-path.js';

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

/** A JSON blob's document, or BlobError naming the blob: every store's getJson. */
export function parseJsonBlob<T>(bytes: Buffer, ref: string): T {
  try {
    return JSON.parse(bytes.toString('utf8')) as T;
  } catch (err) {
    throw new BlobError(`blob ${ref} is not valid JSON: ${(err as Error).message}`);
  }
}

/** What every blob store offers; references are portable between stores (same bytes, same ref). */
export interface BlobStore {
  /** The store's canonical URI (`file:///abs/path` or `s3://bucket/prefix`); openBlobStore(uri) opens it again. */
  readonly uri: string;
  /** Stores bytes content-addressed (stored once) and returns `blob:cas/<2 hex>/<sha256>.<ext>`. */
  putBytes(data: Uint8Array, ext?: string): Promise<string>;
  /** Writes JSON under `blob:named/<key>`, replacing what was there; readers never see half a document. */
  putJson(key: string, value: unknown): Promise<string>;
  /** The bytes behind a reference; BlobError `blob not found: <ref>` when there are none. */
  getBytes(ref: string): Promise<Buffer>;
  getJson<T = unknown>(ref: string): Promise<T>;
  /** Whether a reference has a blob (false also for a reference this store refuses). */
  exists(ref: string): Promise<boolean>;
  namedRef(key: string): string;
}

/**
 * Writes `blob:named/<key>` only if nothing is there yet: true when this call created it, false
 * when it existed (nothing written). Atomic against concurrent callers on both stores (a hard link
 * on a filesystem, `If-None-Match: *` on S3): the building block for commit records.
 */
export interface ConditionalBlobStore extends BlobStore {
  putJsonIfAbsent(key: string, value: unknown): Promise<boolean>;
}

export class LocalBlobStore implements ConditionalBlobStore {
  constructor(readonly root: string) {
    // A store URI given where a directory is expected would quietly become ./s3:/bucket/…
    if (/^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(root))
      throw new BlobError(
        `LocalBlobStore takes a directory, not the URI ${JSON.stringify(root)}: open a store URI with openBlobStore`,
      );
  }

  get uri(): string {
    return pathToFileURL(path.resolve(this.root)).href;
  }

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
      return await readBoundedBytesAsync(this.pathOf(ref), BLOB_FILE);
    } catch (err) {
      if ((err as UnreadableFile).reason === 'no such file') throw new BlobError(`blob not found: ${ref}`);
      throw err;
    }
  }

  async getJson<T = unknown>(ref: string): Promise<T> {
    return parseJsonBlob<T>(await this.getBytes(ref), ref);
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

  async putJsonIfAbsent(key: string, value: unknown): Promise<boolean> {
    const file = this.pathOf(this.namedRef(key));
    await fs.mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    await fs.writeFile(tmp, JSON.stringify(value));
    try {
      // link(2) fails on an existing name (rename would replace it): one caller wins, whole.
      await fs.link(tmp, file);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw err;
    } finally {
      await fs.rm(tmp, { force: true });
    }
  }
}

/**
 * The object key path of a reference, the same rules as LocalBlobStore.pathOf on a POSIX root:
 * `blob:` + a relative path, normalised (`a/./b`, `a//b`, `a/x/../b` → `a/b`), that stays strictly
 * inside the store. Also refuses a leading backslash (as workers/tempo_common/blobs.py does).
 */
export function refPath(ref: string): string {
  if (typeof ref !== 'string' || !ref.startsWith(BLOB_PREFIX))
    throw new BlobError(`not a blob reference: ${JSON.stringify(ref)}`);
  const rel = ref.slice(BLOB_PREFIX.length);
  const root = '/r';
  const full = path.posix.resolve(root, rel);
  if (!rel || rel.includes('\0') || rel.startsWith('/') || rel.startsWith('\\') || !full.startsWith(`${root}/`))
    throw new BlobError(`blob reference escapes the store: ${JSON.stringify(ref)}`);
  return full.slice(root.length + 1);
}

/** Where a store URI points. */
export type BlobStoreLocation = { kind: 'local'; root: string } | { kind: 's3'; bucket: string; prefix: string };

const S3_BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

function fail(ctx: z.RefinementCtx, message: string): never {
  ctx.addIssue({ code: 'custom', message });
  return z.NEVER as never;
}

function parseS3(uri: string, ctx: z.RefinementCtx): BlobStoreLocation {
  const m = /^s3:\/\/([^/?#]*)(\/[^?#]*)?([?#].*)?$/i.exec(uri);
  if (!m) return fail(ctx, 'not of the form s3://bucket/prefix');
  const [, bucket = '', rawPrefix = '', rest] = m;
  if (rest)
    return fail(
      ctx,
      'a query or fragment is not allowed (endpoint, region and credentials come from the AWS_* variables)',
    );
  if (!bucket) return fail(ctx, 'no bucket (s3://bucket/prefix)');
  if (bucket.includes('@') || bucket.includes(':'))
    return fail(
      ctx,
      `bucket ${JSON.stringify(bucket)} holds credentials or a port; set AWS_ENDPOINT_URL_S3 and the AWS_* credential variables instead`,
    );
  if (!S3_BUCKET.test(bucket) || bucket.includes('..') || /^\d+\.\d+\.\d+\.\d+$/.test(bucket))
    return fail(
      ctx,
      `bucket ${JSON.stringify(bucket)} is not a valid S3 bucket name (3-63 of a-z 0-9 . -, starting and ending with a letter or digit)`,
    );
  const prefix = rawPrefix.replace(/^\/+|\/+$/g, '');
  if (prefix) {
    const segs = prefix.split('/');
    if (segs.some((seg) => seg === '' || seg === '.' || seg === '..'))
      return fail(ctx, `prefix ${JSON.stringify(prefix)} has an empty, "." or ".." segment`);
    if (/[\0\\]/.test(prefix)) return fail(ctx, `prefix ${JSON.stringify(prefix)} holds a NUL or a backslash`);
  }
  return { kind: 's3', bucket, prefix };
}

/** The directory of `file:///abs/path` (percent-decoded) or of a path (`~/` expanded, relative to the
 *  working directory): never on a virtual filesystem (a store there spins on its first write). */
function parseLocal(uri: string, ctx: z.RefinementCtx): BlobStoreLocation {
  let given = uri;
  if (uri.startsWith('file:')) {
    try {
      if (!/^file:\/\//i.test(uri)) throw new Error('no // after file:');
      const url = new URL(uri);
      if (url.search || url.hash) throw new Error('a query or fragment is not allowed');
      given = fileURLToPath(url);
    } catch (err) {
      return fail(ctx, `not a local file URL (file:///absolute/path): ${(err as Error).message}`);
    }
  }
  // Again after percent-decoding: %00 or %0A in a file: URL is a NUL or a newline in the path.
  const user = parseUserPath(given);
  if ('problem' in user) return fail(ctx, `the path ${JSON.stringify(given)} ${user.problem}`);
  const root = path.resolve(user.path);
  const virtual = virtualFilesystemOf(root);
  if (virtual) return fail(ctx, `${root} is under ${virtual}, a virtual filesystem, not a place for files`);
  return { kind: 'local', root };
}

/** A store URI: `s3://bucket[/prefix]`, `file:///abs/path`, or a path (relative to the working directory). */
export const BlobStoreUri = z
  .string({ error: 'a blob store URI must be a string' })
  .min(1, { error: 'empty (give s3://bucket/prefix, file:///path or a path)' })
  .transform((uri, ctx): BlobStoreLocation => {
    // Before any parsing: the URL parser drops surrounding spaces, tabs and newlines silently.
    const raw = parseUserPath(uri);
    if ('problem' in raw) return fail(ctx, raw.problem);
    const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(uri)?.[1]?.toLowerCase();
    if (scheme === 's3') return parseS3(uri, ctx);
    if (scheme === undefined || scheme === 'file') return parseLocal(uri, ctx);
    return fail(
      ctx,
      `unsupported scheme ${JSON.stringify(`${scheme}:`)} (give s3://bucket/prefix, file:///path or a path)`,
    );
  });

/** Parses a store URI; BlobError naming the value and what is wrong with it. */
export function parseBlobStoreUri(uri: unknown): BlobStoreLocation {
  const r = BlobStoreUri.safeParse(uri);
  if (r.success) return r.data;
  throw new BlobError(
    `bad blob store URI ${JSON.stringify(uri) ?? String(uri)}: ${r.error.issues.map((i) => i.message).join('; ')}`,
  );
}

/** The canonical URI of a location (what BlobStore.uri gives). */
export function blobStoreUri(loc: BlobStoreLocation): string {
  return loc.kind === 'local'
    ? pathToFileURL(loc.root).href
    : `s3://${loc.bucket}${loc.prefix ? `/${loc.prefix}` : ''}`;
}

export interface OpenBlobStoreOptions {
  /** Where S3 settings come from (default process.env): AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
   *  AWS_SESSION_TOKEN, AWS_REGION (or AWS_DEFAULT_REGION), AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL). */
  env?: NodeJS.ProcessEnv;
}

/** Opens the store a URI names (the S3 client module loads only for an s3:// URI). */
export async function openBlobStore(uri: string, opts: OpenBlobStoreOptions = {}): Promise<ConditionalBlobStore> {
  const loc = parseBlobStoreUri(uri);
  if (loc.kind === 'local') return new LocalBlobStore(loc.root);
  // biome-ignore lint/suspicious/noImportCycles: the AWS SDK is loaded only for an s3:// store
  const { S3BlobStore } = await import('./blobstore-s3.js');
  return new S3BlobStore(loc, { env: opts.env });
}
