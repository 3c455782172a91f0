// Raw records from files: JSONL lines and Parquet rows (hyparquet), each with its 1-based number.
import { promises as fs } from 'node:fs';
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, parquetSchema } from 'hyparquet';
import { DatasetError } from './rows.js';

export interface RawRecord {
  row: number;
  value: unknown;
  /** Set when the line itself could not be read (bad JSON). */
  error?: string;
}

export async function readJsonl(file: string): Promise<RawRecord[]> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    throw new DatasetError(`cannot read ${file}: ${(err as Error).message}`);
  }
  if (text.trim().length === 0) throw new DatasetError(`${file} is empty`);
  const out: RawRecord[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim().length === 0) return;
    try {
      out.push({ row: i + 1, value: JSON.parse(line) });
    } catch (err) {
      out.push({ row: i + 1, value: null, error: `invalid JSON: ${(err as Error).message}` });
    }
  });
  return out;
}

export const REQUIRED_PARQUET_COLUMNS = ['problem', 'answer'] as const;
const IMAGE_COLUMNS = ['images', 'image'];

export async function readParquet(file: string): Promise<RawRecord[]> {
  let stat;
  try {
    stat = await fs.stat(file);
  } catch (err) {
    throw new DatasetError(`cannot read ${file}: ${(err as Error).message}`);
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
    objects = (await parquetReadObjects({ file: buffer, metadata, columns: wanted, utf8: false })) as Record<string, unknown>[];
  } catch (err) {
    throw new DatasetError(`cannot decode ${file}: ${(err as Error).message}`);
  }
  // utf8: false keeps image bytes binary; a problem/answer stored without a UTF8 annotation is decoded here
  return objects.map((value, i) => ({ row: i + 1, value: decodeTextFields(value) }));
}

function decodeTextFields(row: Record<string, unknown>): Record<string, unknown> {
  const out = { ...row };
  for (const key of ['id', ...REQUIRED_PARQUET_COLUMNS]) {
    const v = out[key];
    if (v instanceof Uint8Array) out[key] = Buffer.from(v).toString('utf8');
  }
  return out;
}
