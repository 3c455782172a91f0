// Image intake: every image a dataset names (bytes, a local path, a data: URL, an allowlisted
// http(s) URL) is checked against size and pixel limits, decoded by sharp, normalised to PNG and
// stored content-addressed, so a diagram used by 8 samples is stored once. Anything else is an
// ImageError that names the image; nothing here trusts a path or a header.
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import axios from 'axios';
import sharp, { type Metadata } from 'sharp';
import type { BlobStore } from '../stores/blobstore.js';
import { childLogger } from '../base/log.js';

const log = childLogger('images');

export type ImageErrorCode =
  | 'refused_path'
  | 'refused_url'
  | 'not_found'
  | 'too_many_bytes'
  | 'too_many_pixels'
  | 'not_an_image'
  | 'unsupported_format'
  | 'corrupt'
  | 'fetch_failed'
  | 'bad_source';

export class ImageError extends Error {
  constructor(
    readonly code: ImageErrorCode,
    readonly image: string,
    readonly detail: string,
    readonly row?: number,
  ) {
    super(`${row === undefined ? '' : `row ${row}: `}image ${image}: ${detail}`);
    this.name = 'ImageError';
  }
}

/** What a dataset may give for one image. */
export type ImageSource =
  | Uint8Array
  | string
  | { bytes?: Uint8Array | null; path?: string | null; url?: string | null };

export interface ImageIntakeOptions {
  store: BlobStore;
  /** Local paths must resolve (symlinks followed) under one of these directories. */
  roots: string[];
  /** Relative paths resolve against this directory (it must itself be under a root). */
  baseDir?: string;
  /** Hostnames allowed for http(s) images; empty (the default) refuses every URL. */
  allowHosts?: string[];
  maxPixels?: number;
  maxBytes?: number;
  fetchTimeoutMs?: number;
}

// Formats decoded from user data. SVG is not among them: librsvg would follow external references.
const ACCEPTED_FORMATS = new Set(['png', 'jpeg', 'webp', 'gif', 'tiff']);
const MIME: Record<string, string> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  bmp: 'image/bmp',
  tiff: 'image/tiff',
};

/** The image type from magic bytes, or null. */
export function sniffImageType(bytes: Uint8Array): keyof typeof MIME | null {
  const b = (i: number) => bytes[i];
  if (b(0) === 0x89 && b(1) === 0x50 && b(2) === 0x4e && b(3) === 0x47) return 'png';
  if (b(0) === 0xff && b(1) === 0xd8 && b(2) === 0xff) return 'jpeg';
  if (b(0) === 0x47 && b(1) === 0x49 && b(2) === 0x46 && b(3) === 0x38) return 'gif';
  if (b(0) === 0x52 && b(1) === 0x49 && b(2) === 0x46 && b(3) === 0x46 && b(8) === 0x57 && b(9) === 0x45) return 'webp';
  if (b(0) === 0x42 && b(1) === 0x4d) return 'bmp';
  if ((b(0) === 0x49 && b(1) === 0x49 && b(2) === 0x2a) || (b(0) === 0x4d && b(1) === 0x4d && b(3) === 0x2a))
    return 'tiff';
  return null;
}

const DATA_URL = /^data:([^;,]*)((?:;[^;,]*)*),(.*)$/s;

/** Fixes a wrong or missing media type ("data:image/None;base64,…") from the bytes themselves. */
export function repairDataUrl(url: string): string {
  const m = DATA_URL.exec(url);
  if (!m || !/;base64/i.test(m[2]!)) return url;
  const head = Buffer.from(m[3]!.slice(0, 64), 'base64');
  const type = sniffImageType(head);
  if (!type || m[1] === MIME[type]) return url;
  return `data:${MIME[type]}${m[2]},${m[3]}`;
}

/**
 * The first PNG chunk whose CRC does not match, as a sentence (libvips reports a bad CRC as a
 * "read error" or, for the header, a "write error"); null when every complete chunk checks out.
 */
export function pngCrcProblem(bytes: Uint8Array): string | null {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = 8; at + 12 <= view.length; ) {
    const len = view.readUInt32BE(at);
    const end = at + 8 + len;
    if (end + 4 > view.length) return null; // truncated: the decoder says so
    const type = view.toString('latin1', at + 4, at + 8);
    if (crc32(view.subarray(at + 4, end)) !== view.readUInt32BE(end))
      return `bad CRC (checksum) in the PNG ${JSON.stringify(type)} chunk at byte ${at}: the file is damaged`;
    if (type === 'IEND') return null;
    at = end + 4;
  }
  return null;
}

export interface DecodeLimits {
  maxPixels: number;
  maxBytes: number;
}

/** Decodes any accepted image and re-encodes it as PNG (RGB, EXIF orientation applied). */
export async function normalizeToPng(bytes: Uint8Array, limits: DecodeLimits, name = 'image'): Promise<Buffer> {
  if (bytes.length === 0) throw new ImageError('not_an_image', name, 'empty file');
  if (bytes.length > limits.maxBytes)
    throw new ImageError('too_many_bytes', name, `${bytes.length} bytes > limit ${limits.maxBytes}`);
  const crcProblem = sniffImageType(bytes) === 'png' ? pngCrcProblem(bytes) : null;
  if (crcProblem) throw new ImageError('corrupt', name, crcProblem);
  let meta: Metadata;
  try {
    // header only (no decode): the pixel check below can then name the claimed size
    meta = await sharp(bytes, { limitInputPixels: false }).metadata();
  } catch (err) {
    throw classify(err, name);
  }
  if (!meta.format || !ACCEPTED_FORMATS.has(meta.format))
    throw new ImageError('unsupported_format', name, `format ${meta.format ?? 'unknown'} is not accepted`);
  const pixels = (meta.width ?? 0) * (meta.height ?? 0);
  if (pixels <= 0) throw new ImageError('corrupt', name, 'no dimensions');
  if (pixels > limits.maxPixels)
    throw new ImageError('too_many_pixels', name, `${meta.width}×${meta.height} exceeds ${limits.maxPixels} pixels`);
  try {
    return await sharp(bytes, { limitInputPixels: limits.maxPixels, failOn: 'warning' })
      .rotate()
      .flatten({ background: '#ffffff' })
      .toColourspace('srgb')
      .png({ compressionLevel: 6 })
      .toBuffer();
  } catch (err) {
    throw classify(err, name);
  }
}

function classify(err: unknown, name: string): ImageError {
  if (err instanceof ImageError) return err;
  const msg = (err as Error)?.message ?? String(err);
  if (/unsupported image format/i.test(msg)) return new ImageError('not_an_image', name, 'not an image');
  if (/pixel limit/i.test(msg)) return new ImageError('too_many_pixels', name, msg);
  return new ImageError('corrupt', name, `cannot decode: ${msg.split('\n')[0]}`);
}

function isInside(child: string, parent: string): boolean {
  const rel = path.relative(parent, child);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function describe(source: ImageSource): string {
  if (typeof source === 'string') return source.startsWith('data:') ? `${source.slice(0, 40)}…` : source;
  if (source instanceof Uint8Array) return `<${source.length} bytes>`;
  return source.path || (source.url ? describe(source.url) : `<${source.bytes?.length ?? 0} bytes>`);
}

export class ImageIntake {
  private readonly memo = new Map<string, Promise<string>>();
  private readonly limits: DecodeLimits;
  private realRoots: Promise<string[]> | null = null;

  constructor(private readonly opts: ImageIntakeOptions) {
    this.limits = { maxPixels: opts.maxPixels ?? 16_000_000, maxBytes: opts.maxBytes ?? 20 * 1024 * 1024 };
  }

  /** Stores one image as a normalised PNG and returns its blob reference. */
  async ingest(source: ImageSource, row?: number): Promise<string> {
    const name = describe(source);
    try {
      const bytes = await this.readSource(source, name);
      const key = createHash('sha256').update(bytes).digest('hex');
      let ref = this.memo.get(key);
      if (!ref) {
        ref = normalizeToPng(bytes, this.limits, name).then((png) => this.opts.store.putBytes(png, 'png'));
        this.memo.set(key, ref);
        ref.catch(() => this.memo.delete(key));
      }
      return await ref;
    } catch (err) {
      const e = err instanceof ImageError ? err : classify(err, name);
      throw new ImageError(e.code, name, e.detail, row);
    }
  }

  private async readSource(source: ImageSource, name: string): Promise<Uint8Array> {
    if (source instanceof Uint8Array) return source;
    if (typeof source === 'string') return this.readString(source, name);
    if (source && typeof source === 'object') {
      if (source.bytes && source.bytes.length > 0) return source.bytes;
      if (source.path) return this.readString(source.path, name);
      if (source.url) return this.readString(source.url, name);
    }
    throw new ImageError('bad_source', name, 'no bytes, path or url');
  }

  private async readString(s: string, name: string): Promise<Uint8Array> {
    const value = s.trim();
    if (value.startsWith('data:')) return this.readDataUrl(value, name);
    const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(value)?.[1]?.toLowerCase();
    if (scheme && scheme.length > 1) {
      if (scheme === 'http' || scheme === 'https') return this.fetchUrl(value, name);
      throw new ImageError('refused_url', name, `${scheme}: URLs are not accepted`);
    }
    return this.readPath(value, name);
  }

  private readDataUrl(url: string, name: string): Uint8Array {
    const m = DATA_URL.exec(repairDataUrl(url));
    if (!m) throw new ImageError('bad_source', name, 'malformed data URL');
    const payload = m[3]!;
    const base64 = /;base64/i.test(m[2]!);
    if ((base64 ? payload.length * 0.75 : payload.length) > this.limits.maxBytes * 1.01)
      throw new ImageError('too_many_bytes', name, `data URL larger than ${this.limits.maxBytes} bytes`);
    return base64 ? Buffer.from(payload, 'base64') : Buffer.from(decodeURIComponent(payload), 'latin1');
  }

  private async fetchUrl(url: string, name: string): Promise<Uint8Array> {
    let host: string;
    try {
      host = new URL(url).hostname.toLowerCase();
    } catch {
      throw new ImageError('refused_url', name, 'malformed URL');
    }
    const allowed = (this.opts.allowHosts ?? []).map((h) => h.toLowerCase());
    if (!allowed.includes(host))
      throw new ImageError('refused_url', name, `host ${host} is not in dataset.allow_hosts`);
    try {
      const res = await axios.get<ArrayBuffer>(url, {
        responseType: 'arraybuffer',
        maxContentLength: this.limits.maxBytes,
        maxRedirects: 0,
        timeout: this.opts.fetchTimeoutMs ?? 30_000,
      });
      log.debug({ url, bytes: res.data.byteLength }, 'fetched image');
      return new Uint8Array(res.data);
    } catch (err) {
      throw new ImageError('fetch_failed', name, (err as Error).message);
    }
  }

  private async rootsReal(): Promise<string[]> {
    this.realRoots ??= Promise.all(
      this.opts.roots.map(async (r) => {
        try {
          return await fs.realpath(path.resolve(r));
        } catch {
          return null;
        }
      }),
    ).then((list) => list.filter((r): r is string => r !== null));
    return this.realRoots;
  }

  private async readPath(p: string, name: string): Promise<Uint8Array> {
    if (p.includes('\0')) throw new ImageError('refused_path', name, 'NUL in path');
    if (p.split(/[\\/]+/).includes('..'))
      throw new ImageError('refused_path', name, '".." is not allowed in image paths');
    const roots = await this.rootsReal();
    if (roots.length === 0)
      throw new ImageError('refused_path', name, 'no image roots are configured (dataset.image_roots)');
    let full: string;
    if (path.isAbsolute(p)) full = p;
    else if (this.opts.baseDir) full = path.resolve(this.opts.baseDir, p);
    else full = path.resolve(roots[0]!, p);
    if (
      !roots.some((r) => isInside(path.resolve(full), r)) &&
      !this.opts.roots.some((r) => isInside(path.resolve(full), path.resolve(r)))
    )
      throw new ImageError('refused_path', name, 'outside the configured image roots');
    let real: string;
    try {
      real = await fs.realpath(full);
    } catch {
      throw new ImageError('not_found', name, 'file not found');
    }
    if (!roots.some((r) => isInside(real, r)))
      throw new ImageError('refused_path', name, 'resolves (through a symlink) outside the image roots');
    const stat = await fs.stat(real);
    if (!stat.isFile()) throw new ImageError('not_found', name, 'not a regular file');
    if (stat.size > this.limits.maxBytes)
      throw new ImageError('too_many_bytes', name, `${stat.size} bytes > limit ${this.limits.maxBytes}`);
    return fs.readFile(real);
  }
}

/** A stored PNG as a data: URL for an OpenAI-style image_url message part. */
export async function imageDataUrl(store: BlobStore, ref: string): Promise<string> {
  const bytes = await store.getBytes(ref);
  const type = sniffImageType(bytes) ?? 'png';
  return `data:${MIME[type]};base64,${bytes.toString('base64')}`;
}
