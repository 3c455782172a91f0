// Raw records from files: JSONL lines and Parquet rows (hyparquet), each with its 1-based number.
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, parquetSchema } from 'hyparquet';
import { checkRegularFile, DATA_FILE, readBoundedBytesAsync } from '../../base/bounded-file.js';
import { decodeUtf8 } from '../../base/utf8.js';
import { DatasetError } from './rows.js';

export interface RawRecord {
  row: number;
  value: unknown;
  /** Set when the line itself could not be read (bad JSON). */
  error?: string;
}

const BOM = [0xef, 0xbb, 0xbf];

export async function readJsonl(file: string): Promise<RawRecord[]> {
  let bytes: Buffer;
  try {
    bytes = await readBoundedBytesAsync(file, DATA_FILE);
  } catch (err) {
    throw new DatasetError((err as Error).message);
  }
  // a UTF-8 byte order mark belongs to the file, not to row 1
  if (BOM.every((b, i) => bytes[i] === b)) bytes = bytes.subarray(BOM.length);
  if (bytes.toString('latin1').trim().length === 0) throw new DatasetError(`${file} is empty`);
  const out: RawRecord[] = [];
  let start = 0;
  for (let row = 1; start <= bytes.length; row++) {
    let end = bytes.indexOf(0x0a, start);
    if (end < 0) end = bytes.length;
    const raw = bytes.subarray(start, end > start && bytes[end - 1] === 0x0d ? end - 1 : end);
    start = end + 1;
    let line: string;
    try {
      line = decodeUtf8(raw);
    } catch (err) {
      out.push({ row, value: null, error: `${(err as Error).message} of the line` });
      continue;
    }
    if (line.trim().length === 0) continue;
    try {
      out.push({ row, value: JSON.parse(line) });
    } catch (err) {
      out.push({ row, value: null, error: `invalid JSON: ${(err as Error).message}` });
    }
  }
  return out;
}

export const REQUIRED_PARQUET_COLUMNS = ['problem', 'answer'] as const;
const IMAGE_COLUMNS = ['images', 'image'];

export async function readParquet(file: string): Promise<RawRecord[]> {
  let stat;
  try {
    // read in slices by hyparquet, whatever its size; a FIFO or a device is never opened
    stat = checkRegularFile(file, { maxBytes: Number.MAX_SAFE_INTEGER, what: 'a Parquet file' });
  } catch (err) {
    throw new DatasetError((err as Error).message);
  }
  if (stat.size === 0) throw new DatasetError(`${file} is empty`);
  let columns: string[];
  let buffer;
  let metadata;
  try {
    buffer = await asyncBufferFromFile(file);
    metadata = await parquetMetadataAsync(buffer);
    columns = parquetSchema(metadata).children.map((c) => c.element.name);
  } catch (err) {
    throw new DatasetError(`${file} is not a readable Parquet file: ${(err as Error).message}`);
  }
  const missing = REQUIRED_PARQUET_COLUMNS.filter((c) => !columns.includes(c));
  const imageColumn = IMAGE_COLUMNS.find((c) => columns.includes(c));
  if (missing.length > 0 || !imageColumn)
    throw new DatasetError(
      `${file} has columns [${columns.join(', ')}]; expected problem, answer and images ` +
        `(missing: ${[...missing, ...(imageColumn ? [] : ['images'])].join(', ')})`,
    );
  const wanted = [...columns.filter((c) => c === 'id'), ...REQUIRED_PARQUET_COLUMNS, imageColumn];
  let objects: Record<string, unknown>[];
  try {
    objects = (await parquetReadObjects({ file: buffer, metadata, columns: wanted, utf8: false })) as Record<
      string,
      unknown
    >[];
  } catch (err) {
    throw new DatasetError(`cannot decode ${file}: ${(err as Error).message}`);
  }
  // utf8: false keeps image bytes binary; a problem/answer stored without a UTF8 annotation is decoded here
  return objects.map((value, i) => {
    try {
      return { row: i + 1, value: decodeTextFields(value) };
    } catch (err) {
      return { row: i + 1, value: null, error: (err as Error).message };
    }
  });
}

function decodeTextFields(row: Record<string, unknown>): Record<string, unknown> {
  const out = { ...row };
  for (const key of ['id', ...REQUIRED_PARQUET_COLUMNS]) {
    const v = out[key];
    if (v instanceof Uint8Array) {
      try {
        out[key] = decodeUtf8(v);
      } catch (err) {
        throw new Error(`${key}: ${(err as Error).message}`);
      }
    }
  }
  return out;
}
