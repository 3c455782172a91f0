// loadDataset: the configured dataset (synthetic, a geo3k folder, a JSONL or Parquet file) as
// PromptRows with their images stored in the blob store. Each row must have what the environment's
// row schema asks (Geo3K: an image; arithmetic: none). A bad row is skipped and reported with its
// row number; the rest loads. A bad file (empty, wrong columns, unreadable) is a DatasetError.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { DatasetConfig } from '../../config/schema.js';
import type { BlobStore } from '../../stores/blobstore.js';
import { ImageIntake, normalizeToPng, type ImageSource } from '../images.js';
import { DEFAULT_ENVIRONMENT, getEnvironment } from '../env/registry.js';
import type { Environment } from '../env/types.js';
import { childLogger } from '../../base/log.js';
import { fileKind } from '../../base/bounded-file.js';
import { readJsonl, readParquet, type RawRecord } from './readers.js';
import {
  DatasetError,
  RawRow,
  STRATIFIED_TASKS,
  describeIssues,
  type LoadedDataset,
  type PromptRow,
  type SkippedRow,
} from './rows.js';
import { rasterize, syntheticProblems } from './synth.js';
import { arithmeticProblems } from './synth-arithmetic.js';

const log = childLogger('data');
const IMAGE_CONCURRENCY = 4;

export type Split = 'train' | 'eval';

/** The files of one split: `{split}` in a path is replaced; a folder is searched for the split's files. */
export async function resolveSplitFiles(cfg: DatasetConfig, splitName: string): Promise<string[]> {
  if (!cfg.path) throw new DatasetError(`dataset.path is required for dataset.kind=${cfg.kind}`);
  const p = path.resolve(cfg.path.replaceAll('{split}', splitName));
  const stat = await fs.stat(p).catch(() => null);
  if (!stat) throw new DatasetError(`dataset path not found: ${p}`);
  if (stat.isFile()) return [p];
  if (!stat.isDirectory()) throw new DatasetError(`dataset path ${p} is ${fileKind(stat)}, not a file or a folder`);
  const ext = cfg.kind === 'parquet' ? '.parquet' : '.jsonl';
  for (const dir of [p, path.join(p, 'data')]) {
    const names = await fs.readdir(dir).catch(() => [] as string[]);
    const hits = names
      .filter(
        (n) =>
          n.endsWith(ext) &&
          (n === `${splitName}${ext}` || n.startsWith(`${splitName}-`) || n.startsWith(`${splitName}_`)),
      )
      .sort()
      .map((n) => path.join(dir, n));
    if (hits.length > 0) return hits;
  }
  throw new DatasetError(`no ${ext} file for split "${splitName}" in ${p}`);
}

/** fn over items, at most `limit` at a time; results in the items' order. */
export async function mapLimited<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/**
 * Validates (by the environment's `rowSchema`, default Geo3K's) and stores each record; invalid rows
 * go to `skipped` with their row number. A row whose id an earlier row already has is skipped too
 * (`seenIds` spans the files of one split).
 */
export async function rowsFromRecords(
  records: RawRecord[],
  intake: ImageIntake,
  idPrefix: string,
  seenIds: Map<string, string> = new Map(),
  rowSchema: Environment['rowSchema'] = RawRow,
): Promise<LoadedDataset> {
  const skipped: SkippedRow[] = [];
  const valid: Array<{ row: number; id: string; data: RawRow }> = [];
  for (const rec of records) {
    if (rec.error) {
      skipped.push({ row: rec.row, reason: rec.error });
      continue;
    }
    const parsed = rowSchema.safeParse(rec.value);
    if (!parsed.success) {
      skipped.push({ row: rec.row, reason: describeIssues(parsed.error, rec.value) });
      continue;
    }
    const id = parsed.data.id ?? `${idPrefix}-${rec.row}`;
    const first = seenIds.get(id);
    if (first !== undefined) {
      skipped.push({ row: rec.row, reason: `duplicate id ${JSON.stringify(id)} (first at ${first})` });
      continue;
    }
    seenIds.set(id, `row ${rec.row} of ${idPrefix}`);
    valid.push({ row: rec.row, id, data: parsed.data });
  }
  const results = await mapLimited(valid, IMAGE_CONCURRENCY, async ({ row, id, data }): Promise<PromptRow | null> => {
    try {
      const images: string[] = [];
      for (const img of data.images) images.push(await intake.ingest(img as ImageSource, row));
      return { id, problem: data.problem, answer: data.answer, images };
    } catch (err) {
      skipped.push({ row, reason: (err as Error).message });
      return null;
    }
  });
  skipped.sort((a, b) => a.row - b.row);
  return { rows: results.filter((r): r is PromptRow => r !== null), skipped };
}

async function loadSynthetic(
  cfg: DatasetConfig,
  split: Split,
  store: BlobStore,
  env: Environment,
): Promise<LoadedDataset> {
  const task = cfg.synthetic_task ?? env.syntheticTasks[0]!;
  if (!env.syntheticTasks.includes(task))
    throw new DatasetError(
      `dataset.synthetic_task ${task} makes rows that environment ${env.name} cannot take; its tasks: ${env.syntheticTasks.join(', ')}`,
    );
  const seed = cfg.synthetic_seed + (split === 'eval' ? 1_000_003 : 0);
  const n = split === 'eval' ? Math.max(4, Math.ceil(cfg.synthetic_size / 4)) : cfg.synthetic_size;
  // A Python environment's own taskset holds the problems: a row names a task by its index (the
  // label), training on tasks 0..n-1 and evaluating on the n/4 after them.
  if (task === 'taskset') {
    const first = split === 'eval' ? cfg.synthetic_size : 0;
    const rows = Array.from({ length: n }, (_, i) => ({
      id: `task-${first + i}`,
      problem: `task ${first + i} of the environment's taskset`,
      answer: String(first + i),
      images: [],
    }));
    return { rows, skipped: [] };
  }
  if (task === 'arithmetic')
    return { rows: arithmeticProblems(n, seed).map((p) => ({ ...p, images: [] })), skipped: [] };
  const problems = syntheticProblems(n, seed, task);
  const limits = { maxPixels: cfg.max_image_pixels, maxBytes: cfg.max_image_bytes };
  const rows = await mapLimited(problems, IMAGE_CONCURRENCY, async (p) => ({
    id: p.id,
    problem: p.problem,
    answer: p.answer,
    // the same normalisation as a file on disk, so `data synth` + geo3k_dir gives identical blobs
    images: [await store.putBytes(await normalizeToPng(await rasterize(p.svg), limits, p.id), 'png')],
  }));
  // Kept beside the rows, not in them: the rows' snapshot (dataset-train.json) stays as it was.
  const strata = STRATIFIED_TASKS.includes(task) ? problems.map((p) => p.stratum!) : undefined;
  return { rows, skipped: [], ...(strata ? { strata } : {}) };
}

/** `environment`: rollout.environment, whose row schema and synthetic tasks the rows follow. */
export async function loadDataset(
  cfg: DatasetConfig,
  split: Split,
  store: BlobStore,
  environment = DEFAULT_ENVIRONMENT,
): Promise<LoadedDataset> {
  const env = getEnvironment(environment);
  if (cfg.kind === 'synthetic') return loadSynthetic(cfg, split, store, env);
  const splitName = split === 'train' ? cfg.train_split : cfg.eval_split;
  const files = await resolveSplitFiles(cfg, splitName);
  const result: LoadedDataset = { rows: [], skipped: [] };
  const seenIds = new Map<string, string>();
  for (const file of files) {
    const dir = path.dirname(file);
    // The dataset's own folder is always an image root; dataset.image_roots adds more.
    const roots = [dir, ...cfg.image_roots];
    const intake = new ImageIntake({
      store,
      roots,
      baseDir: dir,
      allowHosts: cfg.allow_hosts,
      maxPixels: cfg.max_image_pixels,
      maxBytes: cfg.max_image_bytes,
    });
    const records = cfg.kind === 'parquet' ? await readParquet(file) : await readJsonl(file);
    const part = await rowsFromRecords(
      records,
      intake,
      path.basename(file).replace(/\.[^.]+$/, ''),
      seenIds,
      env.rowSchema,
    );
    result.rows.push(...part.rows);
    // with several shards, a row number alone is ambiguous: name the file
    result.skipped.push(
      ...part.skipped.map((s) => (files.length > 1 ? { ...s, reason: `${path.basename(file)}: ${s.reason}` } : s)),
    );
  }
  for (const s of result.skipped) log.warn({ row: s.row, reason: s.reason }, 'dataset row skipped');
  if (result.rows.length === 0)
    throw new DatasetError(
      `no usable rows in ${files.join(', ')} (${result.skipped.length} skipped` +
        `${result.skipped[0] ? `; first: row ${result.skipped[0].row}: ${result.skipped[0].reason}` : ''})`,
    );
  log.info(
    { kind: cfg.kind, split: splitName, rows: result.rows.length, skipped: result.skipped.length },
    'dataset loaded',
  );
  return result;
}
