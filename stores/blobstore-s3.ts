// The blob store on S3 or any S3-compatible server (MinIO, Ceph RGW, R2, S3Proxy, …): a reference's
// path is the object key under the store's prefix, so `blob:cas/ab/ab12….png` in `s3://b/runs` is
// object `runs/cas/ab/ab12….png` of bucket `b`, the same refs LocalBlobStore gives. Loaded by
// openBlobStore (stores/blobstore.ts) only for an s3:// URI.
//
// Settings come from the standard AWS variables: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
// (/ AWS_SESSION_TOKEN; without them the SDK's default chain: profiles, SSO, instance roles),
// AWS_REGION (or AWS_DEFAULT_REGION; default us-east-1), AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL)
// for a non-AWS endpoint, which is then addressed path-style (http://host/bucket/key).
import { createHash } from 'node:crypto';
import {
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import {
  BLOB_PREFIX,
  BlobError,
  blobStoreUri,
  parseJsonBlob,
  refPath,
  type ConditionalBlobStore,
} from './blobstore.js';

interface SdkError {
  name?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
}

const status = (err: unknown): number | undefined => (err as SdkError)?.$metadata?.httpStatusCode;
const errName = (err: unknown): string => (err as SdkError)?.name ?? (err as SdkError)?.Code ?? '';

/** The S3 client settings the AWS variables in `env` give (see the header). */
export function s3ClientConfig(env: NodeJS.ProcessEnv = process.env): S3ClientConfig {
  const endpoint = env.AWS_ENDPOINT_URL_S3 || env.AWS_ENDPOINT_URL || undefined;
  const cfg: S3ClientConfig = { region: env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1' };
  if (env.AWS_ACCESS_KEY_ID && env.AWS_SECRET_ACCESS_KEY)
    cfg.credentials = {
      accessKeyId: env.AWS_ACCESS_KEY_ID,
      secretAccessKey: env.AWS_SECRET_ACCESS_KEY,
      sessionToken: env.AWS_SESSION_TOKEN || undefined,
    };
  if (endpoint) {
    let host: string;
    try {
      host = new URL(endpoint).hostname;
    } catch {
      throw new BlobError(
        `bad S3 endpoint ${JSON.stringify(endpoint)} (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL): not a URL`,
      );
    }
    cfg.endpoint = endpoint;
    if (!/(^|\.)amazonaws\.com(\.cn)?$/.test(host)) {
      // Not AWS: path-style addressing (no bucket DNS names), and checksums only where the API
      // requires them (not every S3-compatible server takes the SDK's default CRC32 headers).
      cfg.forcePathStyle = true;
      cfg.requestChecksumCalculation = 'WHEN_REQUIRED';
      cfg.responseChecksumValidation = 'WHEN_REQUIRED';
    }
  }
  return cfg;
}

export class S3BlobStore implements ConditionalBlobStore {
  readonly bucket: string;
  /** Key prefix without slashes at either end ('' for the whole bucket). */
  readonly prefix: string;
  readonly client: S3Client;
  readonly uri: string;

  constructor(loc: { bucket: string; prefix?: string }, opts: { env?: NodeJS.ProcessEnv; client?: S3Client } = {}) {
    this.bucket = loc.bucket;
    this.prefix = (loc.prefix ?? '').replace(/^\/+|\/+$/g, '');
    this.uri = blobStoreUri({ kind: 's3', bucket: this.bucket, prefix: this.prefix });
    this.client = opts.client ?? new S3Client(s3ClientConfig(opts.env));
  }

  /** The object key behind a reference; refuses what LocalBlobStore.pathOf refuses. */
  keyOf(ref: string): string {
    const rel = refPath(ref);
    return this.prefix ? `${this.prefix}/${rel}` : rel;
  }

  /** Closes the client's sockets (a process otherwise keeps them open for a while). */
  close(): void {
    this.client.destroy();
  }

  private failure(err: unknown, ref: string): unknown {
    if (errName(err) === 'NoSuchBucket')
      return new BlobError(
        `blob store ${this.uri}: bucket ${JSON.stringify(this.bucket)} does not exist (reading or writing ${ref})`,
      );
    return err;
  }

  private async has(key: string, ref: string): Promise<boolean> {
    try {
      await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      return true;
    } catch (err) {
      // A HEAD has no body: a missing bucket answers 404 like a missing key.
      if (status(err) === 404 || errName(err) === 'NotFound') return false;
      throw this.failure(err, ref);
    }
  }

  private async put(
    key: string,
    ref: string,
    body: Uint8Array | string,
    contentType: string,
    ifAbsent = false,
  ): Promise<void> {
    try {
      await this.client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: key,
          Body: body,
          ContentType: contentType,
          ...(ifAbsent ? { IfNoneMatch: '*' } : {}),
        }),
      );
    } catch (err) {
      throw this.failure(err, ref);
    }
  }

  async putBytes(data: Uint8Array, ext = 'bin'): Promise<string> {
    const digest = createHash('sha256').update(data).digest('hex');
    const ref = `${BLOB_PREFIX}cas/${digest.slice(0, 2)}/${digest}.${ext}`;
    const key = this.keyOf(ref);
    // Stored once: the same bytes are the same object. Two writers racing both upload identical
    // bytes, which is harmless.
    if (!(await this.has(key, ref))) await this.put(key, ref, data, 'application/octet-stream');
    return ref;
  }

  private jsonText(key: string, value: unknown): string {
    const text = JSON.stringify(value);
    if (text === undefined) throw new BlobError(`blob:named/${key}: ${typeof value} is not JSON`);
    return text;
  }

  async putJson(key: string, value: unknown): Promise<string> {
    const ref = this.namedRef(key);
    // A PUT replaces the object whole: readers see the old document or the new one.
    await this.put(this.keyOf(ref), ref, this.jsonText(key, value), 'application/json');
    return ref;
  }

  async putJsonIfAbsent(key: string, value: unknown): Promise<boolean> {
    const ref = this.namedRef(key);
    const objectKey = this.keyOf(ref);
    const text = this.jsonText(key, value);
    for (let attempt = 0; ; attempt++) {
      try {
        await this.put(objectKey, ref, text, 'application/json', true);
        return true;
      } catch (err) {
        if (status(err) === 412 || errName(err) === 'PreconditionFailed') return false;
        // 409 ConditionalRequestConflict: a concurrent write or delete of the key; AWS says retry.
        if ((status(err) === 409 || errName(err) === 'ConditionalRequestConflict') && attempt < 5) {
          await new Promise((r) => setTimeout(r, 50 * 2 ** attempt));
          continue;
        }
        if (status(err) === 501 || errName(err) === 'NotImplemented')
          throw new BlobError(
            `blob store ${this.uri}: the endpoint does not support conditional writes (PUT with If-None-Match: *), needed for ${ref}`,
          );
        throw err;
      }
    }
  }

  async getBytes(ref: string): Promise<Buffer> {
    const key = this.keyOf(ref);
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      if (!res.Body) return Buffer.alloc(0);
      const bytes = await res.Body.transformToByteArray();
      return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    } catch (err) {
      if (errName(err) === 'NoSuchKey' || (status(err) === 404 && errName(err) !== 'NoSuchBucket'))
        throw new BlobError(`blob not found: ${ref}`);
      throw this.failure(err, ref);
    }
  }

  async getJson<T = unknown>(ref: string): Promise<T> {
    return parseJsonBlob<T>(await this.getBytes(ref), ref);
  }

  async exists(ref: string): Promise<boolean> {
    let key: string;
    try {
      key = this.keyOf(ref);
    } catch {
      return false; // as LocalBlobStore: a reference this store refuses has no blob
    }
    return this.has(key, ref);
  }

  namedRef(key: string): string {
    return `${BLOB_PREFIX}named/${key}`;
  }
}
