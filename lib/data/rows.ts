// The shape of one prompt, and the zod schema every raw dataset row (JSONL line, Parquet row) passes.
import { z } from 'zod';

/** One prompt as the rest of tempo-rl sees it; images are blob refs of normalised PNGs. */
export interface PromptRow {
  id: string;
  problem: string;
  answer: string;
  images: string[];
}
export interface SkippedRow {
  /** 1-based: the line of a JSONL file, the row of a Parquet file. */
  row: number;
  reason: string;
}
export interface LoadedDataset {
  rows: PromptRow[];
  skipped: SkippedRow[];
  /** One stratum a row, for the datasets that declare them (STRATIFIED_TASKS): what
   *  rollout.prompt_order stratified balances each step over. */
  strata?: number[];
}

export class DatasetError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DatasetError';
  }
}

const bytes = z.custom<Uint8Array>((v) => v instanceof Uint8Array, 'expected bytes');
/** One image entry: a path / URL / data URL, raw bytes, or the HF {bytes, path} struct. */
export const RawImage = z.union([
  z.string().min(1),
  bytes,
  z.looseObject({ bytes: bytes.nullish(), path: z.string().nullish(), url: z.string().nullish() }),
]);
export type RawImage = z.infer<typeof RawImage>;

const IMAGE_PLACEHOLDER = /<image>/g;

const answerText = z
  .union([z.string(), z.number()])
  .transform((v) => String(v).trim())
  .pipe(z.string().min(1, 'empty answer'));

const rowFields = {
  id: z.union([z.string(), z.number()]).nullish(),
  problem: z.string().trim().min(1, 'empty problem'),
  answer: answerText,
  images: z.array(RawImage).nullish(),
  image: RawImage.nullish(),
};

/** A row with at least one image (Geo3K's rows): geo3k_dir rows, HF geo3k / geo3k_imgurl rows and plain JSONL rows all fit this. */
export const RawRow = z.looseObject(rowFields).transform((r, ctx) => {
  const images = [...(r.images ?? []), ...(r.image ? [r.image] : [])];
  if (images.length === 0) {
    ctx.addIssue({ code: 'custom', message: 'no image' });
    return z.NEVER;
  }
  // a problem that marks where its images go must mark each one exactly once
  const placeholders = r.problem.match(IMAGE_PLACEHOLDER)?.length ?? 0;
  if (placeholders > 0 && placeholders !== images.length) {
    ctx.addIssue({
      code: 'custom',
      path: ['problem'],
      message: `has ${placeholders} <image> placeholders but the row has ${images.length} image(s)`,
    });
    return z.NEVER;
  }
  return { id: r.id == null ? null : String(r.id), problem: r.problem, answer: r.answer, images };
});
export type RawRow = z.infer<typeof RawRow>;

/** A row of a text-only environment: an image would never reach the model, so a row with one is
 *  refused rather than trained on without it. */
export const TextRow = z.looseObject(rowFields).transform((r, ctx): RawRow => {
  if ((r.images?.length ?? 0) > 0 || r.image) {
    ctx.addIssue({ code: 'custom', message: 'the row has an image, but the environment is text-only' });
    return z.NEVER;
  }
  return { id: r.id == null ? null : String(r.id), problem: r.problem, answer: r.answer, images: [] };
});

/** dataset.synthetic_task: the seeded generators of lib/data (each environment names the ones whose rows it takes). */
export const SYNTHETIC_TASKS = ['measure', 'angle_facts', 'arithmetic', 'taskset'] as const;
export type SyntheticTask = (typeof SYNTHETIC_TASKS)[number];

/** The synthetic tasks whose rows declare a stratum (angle_facts: the figure's kind, six kinds of
 *  unequal difficulty); every other dataset declares none. */
export const STRATIFIED_TASKS: readonly SyntheticTask[] = ['angle_facts'];

/** Why `rollout.prompt_order: stratified` cannot balance this dataset (it declares no strata), or null
 *  when it can. `task`: dataset.synthetic_task, or the environment's first task when absent. */
export function strataRefusal(dataset: { kind: string }, task: SyntheticTask | undefined): string | null {
  if (dataset.kind === 'synthetic' && task !== undefined && STRATIFIED_TASKS.includes(task)) return null;
  const what =
    dataset.kind === 'synthetic'
      ? `dataset.kind synthetic with synthetic_task ${task}`
      : `dataset.kind ${dataset.kind}`;
  return `stratified needs a dataset whose train rows declare a stratum (dataset.kind synthetic with synthetic_task ${STRATIFIED_TASKS.join(' or ')}: the figure kind), and ${what} declares none; use rollout.prompt_order shuffle`;
}

function valueAt(value: unknown, keys: PropertyKey[]): unknown {
  let v = value;
  for (const k of keys) v = v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  return v;
}

/** "answer: missing; images.0: Invalid input" — short enough for a skip reason. */
export function describeIssues(err: z.ZodError, value: unknown): string {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return 'row is not a JSON object';
  return err.issues
    .map((i) => {
      const field = i.path.join('.');
      const msg = field && valueAt(value, i.path) == null ? 'missing' : i.message;
      return field ? `${field}: ${msg}` : msg;
    })
    .join('; ');
}
