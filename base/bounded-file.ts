// The one reader of files that a user or a crash can replace — the YAML config, the Temporal profile
// and TLS files, a model's config.json, the state dir's records (workers, engines, runs, step
// records), metrics.jsonl, dataset files, the binaries a pack carries: a regular file of bounded
// size, or an error naming the file and what it is. A plain readFile blocks forever on a FIFO (open
// waits for a writer; in the UI that is one of libuv's four threads for good) and reads /dev/zero
// until memory runs out.
import { closeSync, constants, promises as fs, fstatSync, openSync, readSync, statSync, type Stats } from 'node:fs';
import { decodeUtf8 } from './utf8.js';

/** What a file is read as: the most it can be, and what it is called in the error. */
export interface FileBound {
  maxBytes: number;
  /** "a config file": the error says "more than a config file can be (8.0 MiB)". */
  what: string;
  /** What to do instead, appended to the size error. */
  hint?: string;
}

const MiB = 1024 * 1024;
/** Far above any real config (the shipped ones are a few KB); a bigger file is not one. */
export const CONFIG_FILE: FileBound = { maxBytes: 8 * MiB, what: 'a config file' };
/** A record tempo-rl writes itself (a step record of 65,536 episodes is about 15 MiB). */
export const RECORD_FILE: FileBound = { maxBytes: 256 * MiB, what: 'a record tempo-rl writes' };
/** A JSONL file is read whole: Node's strings and buffers stop near this size anyway. */
export const DATA_FILE: FileBound = {
  maxBytes: 2048 * MiB,
  what: 'a JSONL file read whole',
  hint: 'split it into shards (train-00000.jsonl, train-00001.jsonl, …)',
};
/** A blob of the local store (an image is at most 1 GiB: dataset.max_image_bytes). */
export const BLOB_FILE: FileBound = { maxBytes: 2048 * MiB, what: 'a blob' };
/** A model folder's JSON (config, tokenizer: Qwen's tokenizer.json is 11 MiB). */
export const MODEL_JSON_FILE: FileBound = { maxBytes: 256 * MiB, what: "a model's JSON file" };
/** An executable a pack carries (Node is ~120 MiB, the temporal binary ~100 MiB). */
export const BINARY_FILE: FileBound = { maxBytes: 1024 * MiB, what: 'an executable' };

/** A file that cannot be read: `reason` says why without the file's name, the message names both. */
export class UnreadableFile extends Error {
  readonly exitCode = 2;
  constructor(
    readonly file: string,
    readonly reason: string,
  ) {
    super(`cannot read ${file}: ${reason}`);
    this.name = 'UnreadableFile';
  }
}

/** What a non-regular file is, in words ("a FIFO (named pipe)", "a directory", ...). */
export function fileKind(st: Stats): string {
  if (st.isFile()) return 'a regular file';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  if (st.isSymbolicLink()) return 'a symbolic link';
  return 'not a regular file';
}

function mib(bytes: number): string {
  return `${(bytes / MiB).toFixed(1)} MiB`;
}

function tooBig(bound: FileBound, size: string): string {
  return `it is ${size}, more than ${bound.what} can be (${mib(bound.maxBytes)})${bound.hint ? `: ${bound.hint}` : ''}`;
}

function refuseUnlessRegular(st: Stats, file: string, bound: FileBound): void {
  if (!st.isFile()) throw new UnreadableFile(file, `it is ${fileKind(st)}, not a regular file`);
  if (st.size > bound.maxBytes) throw new UnreadableFile(file, tooBig(bound, mib(st.size)));
}

function asUnreadable(err: unknown, file: string): UnreadableFile {
  if (err instanceof UnreadableFile) return err;
  const code = (err as NodeJS.ErrnoException).code;
  return new UnreadableFile(file, code === 'ENOENT' ? 'no such file' : (err as Error).message);
}

const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;
const CHUNK = 1024 * 1024;

/**
 * Checks that `file` is a regular file within the bound without reading it (for a file another
 * library or process opens: a Parquet reader, a binary that is copied or run). Its Stats.
 */
export function checkRegularFile(file: string, bound: FileBound): Stats {
  try {
    const st = statSync(file);
    refuseUnlessRegular(st, file, bound);
    return st;
  } catch (err) {
    throw asUnreadable(err, file);
  }
}

/** Reads to the end through `read` into buffers sized by the file's size (one read for a file that
 *  did not change since its stat), refusing more than the bound. */
function readLoop(
  size: number,
  file: string,
  bound: FileBound,
  read: (buf: Buffer) => number | Promise<number>,
): Buffer | Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  let next = Math.min(size, bound.maxBytes) + 1;
  const step = (got: number, buf: Buffer): boolean => {
    if (got === 0) return true;
    chunks.push(buf.subarray(0, got));
    total += got;
    if (total > bound.maxBytes) throw new UnreadableFile(file, tooBig(bound, `past ${mib(total)} while read`));
    next = CHUNK;
    return false;
  };
  const sync = (): Buffer | Promise<Buffer> => {
    for (;;) {
      const buf = Buffer.allocUnsafe(next);
      const got = read(buf);
      if (typeof got !== 'number') return got.then((n) => (step(n, buf) ? done() : sync()));
      if (step(got, buf)) return done();
    }
  };
  const done = () => Buffer.concat(chunks, total);
  return sync();
}

/**
 * The bytes of a file. Checked before opening (a FIFO is never opened for a blocking read) and again
 * on the open descriptor (the path may have been swapped in between: O_NONBLOCK keeps that open from
 * waiting on a FIFO); read to at most the bound, whatever the size said.
 */
export function readBoundedBytes(file: string, bound: FileBound): Buffer {
  try {
    refuseUnlessRegular(statSync(file), file, bound);
    const fd = openSync(file, OPEN_FLAGS);
    try {
      const st = fstatSync(fd);
      refuseUnlessRegular(st, file, bound);
      return readLoop(st.size, file, bound, (buf) => readSync(fd, buf, 0, buf.length, null)) as Buffer;
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    throw asUnreadable(err, file);
  }
}

/** readBoundedBytes without blocking the event loop (the UI, the rollout worker's activities). */
export async function readBoundedBytesAsync(file: string, bound: FileBound): Promise<Buffer> {
  try {
    refuseUnlessRegular(await fs.stat(file), file, bound);
    const handle = await fs.open(file, OPEN_FLAGS);
    try {
      const st = await handle.stat();
      refuseUnlessRegular(st, file, bound);
      return await readLoop(
        st.size,
        file,
        bound,
        async (buf) => (await handle.read(buf, 0, buf.length, null)).bytesRead,
      );
    } finally {
      await handle.close();
    }
  } catch (err) {
    throw asUnreadable(err, file);
  }
}

function decoded(bytes: Buffer, file: string): string {
  try {
    return decodeUtf8(bytes);
  } catch (err) {
    throw new UnreadableFile(file, (err as Error).message);
  }
}

/** The text of a file: strict UTF-8, or an error naming the file and the byte. */
export function readBoundedText(file: string, bound: FileBound): string {
  return decoded(readBoundedBytes(file, bound), file);
}

export async function readBoundedTextAsync(file: string, bound: FileBound): Promise<string> {
  return decoded(await readBoundedBytesAsync(file, bound), file);
}

/** A JSON record of the state dir (a worker's, an engine's, a run's): its value, or an error naming the
 *  file (a truncated or foreign file is named, not a bare JSON.parse error). */
export function readJsonRecord(file: string): unknown {
  return parseRecord(readBoundedText(file, RECORD_FILE), file);
}

export async function readJsonRecordAsync(file: string): Promise<unknown> {
  return parseRecord(await readBoundedTextAsync(file, RECORD_FILE), file);
}

function parseRecord(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UnreadableFile(file, `not JSON (${(err as Error).message}): truncated, or not written by tempo-rl`);
  }
}

/** The first `n` bytes of a regular file (fewer if it is shorter): enough to tell what wrote it. */
export function readPrefix(file: string, n: number): Buffer {
  try {
    const fd = openSync(file, OPEN_FLAGS);
    try {
      refuseUnlessRegular(fstatSync(fd), file, { maxBytes: Number.MAX_SAFE_INTEGER, what: 'a file' });
      const buf = Buffer.alloc(n);
      let got = 0;
      for (let r = 1; got < n && r > 0; got += r) r = readSync(fd, buf, got, n - got, null);
      return buf.subarray(0, got);
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    throw asUnreadable(err, file);
  }
}

/** The last `lines` lines of a log (its last 16 KiB at most), or a note that there is none. */
export function readTail(file: string, lines: number): string {
  try {
    const fd = openSync(file, OPEN_FLAGS);
    try {
      const st = fstatSync(fd);
      refuseUnlessRegular(st, file, { maxBytes: Number.MAX_SAFE_INTEGER, what: 'a log' });
      const n = Math.min(st.size, 16 * 1024);
      const buf = Buffer.alloc(n);
      const got = readSync(fd, buf, 0, n, st.size - n);
      return buf.subarray(0, got).toString('utf8').trimEnd().split('\n').slice(-lines).join('\n') || '(empty)';
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    return `(no log: ${asUnreadable(err, file).reason})`;
  }
}
