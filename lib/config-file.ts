// The one reader of config-like files (the YAML config, the Temporal TOML profile file): a regular
// file of bounded size, or an error naming the file and what it is. readFileSync alone blocks forever
// on a FIFO (open waits for a writer) and reads /dev/zero until memory runs out.
import { closeSync, constants, fstatSync, openSync, readSync, statSync, type Stats } from 'node:fs';
import { decodeUtf8 } from './utf8.js';

/** Far above any real config (the shipped ones are a few KB); a bigger file is not one. */
export const MAX_CONFIG_FILE_BYTES = 8 * 1024 * 1024;

/** A config-like file that cannot be read: `reason` says why without the file's name, the message
 *  names both. */
export class ConfigFileError extends Error {
  readonly exitCode = 2;
  constructor(
    readonly file: string,
    readonly reason: string,
  ) {
    super(`cannot read ${file}: ${reason}`);
    this.name = 'ConfigFileError';
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
  return 'not a regular file';
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

function refuseUnlessRegular(st: Stats, file: string): void {
  if (!st.isFile()) throw new ConfigFileError(file, `it is ${fileKind(st)}, not a regular file`);
  if (st.size > MAX_CONFIG_FILE_BYTES)
    throw new ConfigFileError(
      file,
      `it is ${mib(st.size)}, more than a config file can be (${mib(MAX_CONFIG_FILE_BYTES)})`,
    );
}

/**
 * The bytes of a config-like file. Checked before opening (a FIFO is never opened for a blocking
 * read) and again on the open descriptor (the path may have been swapped in between: O_NONBLOCK keeps
 * that open from waiting on a FIFO); read to at most the bound, whatever the size said.
 */
export function readConfigBytes(file: string): Buffer {
  try {
    refuseUnlessRegular(statSync(file), file);
    const fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      refuseUnlessRegular(fstatSync(fd), file);
      return readBounded(fd, file);
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    if (err instanceof ConfigFileError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigFileError(file, code === 'ENOENT' ? 'no such file' : (err as Error).message);
  }
}

function readBounded(fd: number, file: string): Buffer {
  const chunks: Buffer[] = [];
  let total = 0;
  for (;;) {
    const chunk = Buffer.allocUnsafe(64 * 1024);
    const got = readSync(fd, chunk, 0, chunk.length, null);
    if (got === 0) return Buffer.concat(chunks, total);
    chunks.push(chunk.subarray(0, got));
    total += got;
    if (total > MAX_CONFIG_FILE_BYTES)
      throw new ConfigFileError(file, `it grew past ${mib(MAX_CONFIG_FILE_BYTES)} while read: not a config file`);
  }
}

/** The text of a config-like file: strict UTF-8, or an error naming the file and the byte. */
export function readConfigText(file: string): string {
  const bytes = readConfigBytes(file);
  try {
    return decodeUtf8(bytes);
  } catch (err) {
    throw new ConfigFileError(file, (err as Error).message);
  }
}
