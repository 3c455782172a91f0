// Search and filter across a run's episodes (by step, status, outcome, reward, turns, answer, text), a
// page at a time. It reads the step rows (step records and sample blobs, kept once read), never an
// episode's history.
import { z } from 'zod';
import { checkRunId } from '../stores/layout.js';
import type { UiContext } from './context.js';
import { publicRow, recordedRows, type EpisodeRow, type IndexedRow } from './episode-rows.js';
import { stepRecords } from './records.js';
import { rowSource } from './steps.js';

const integer = z
  .string()
  .regex(/^\d{1,9}$/, 'expected an integer ≥ 0')
  .transform(Number);
const number = z
  .string()
  .trim()
  .refine((s) => s !== '' && Number.isFinite(Number(s)), 'expected a number')
  .transform(Number);

/** The query parameters of /api/runs/RUN/episodes. */
export const SearchQuery = z.strictObject({
  step: integer.optional(),
  status: z.enum(['COMPLETED', 'TRUNCATED', 'ABORTED', 'FAILED']).optional(),
  outcome: z.enum(['trained', 'filtered', 'failed']).optional(),
  reward_min: number.optional(),
  reward_max: number.optional(),
  turns: integer.optional(),
  /** A calc_score answer any turn gave (case and surrounding space ignored). */
  answer: z.string().max(200).optional(),
  /** Text the model wrote (case ignored). */
  text: z.string().max(200).optional(),
  offset: integer.default(0),
  limit: integer.pipe(z.number().min(1).max(200)).default(50),
});
export type SearchQuery = z.infer<typeof SearchQuery>;

export interface SearchResult {
  run_id: string;
  total: number;
  offset: number;
  limit: number;
  /** Steps read for this search (the run's recorded steps, or the one asked for). */
  steps_searched: number;
  rows: Array<EpisodeRow & { excerpt: string }>;
}

const EXCERPT_CHARS = 160;

function excerpt(text: string, needle: string | undefined): string {
  const at = needle ? text.toLowerCase().indexOf(needle.toLowerCase()) : -1;
  const from = at < 0 ? 0 : Math.max(0, at - EXCERPT_CHARS / 2);
  const cut = text.slice(from, from + EXCERPT_CHARS);
  return `${from > 0 ? '…' : ''}${cut}${from + EXCERPT_CHARS < text.length ? '…' : ''}`;
}

function matcher(q: SearchQuery): (r: IndexedRow) => boolean {
  const answer = q.answer?.trim().toLowerCase();
  const text = q.text?.toLowerCase();
  return (r) =>
    (q.status === undefined || r.status === q.status) &&
    (q.outcome === undefined || r.outcome === q.outcome) &&
    (q.reward_min === undefined || (r.reward !== null && r.reward >= q.reward_min)) &&
    (q.reward_max === undefined || (r.reward !== null && r.reward <= q.reward_max)) &&
    (q.turns === undefined || r.turns === q.turns) &&
    (!answer || r.answers.some((a) => a !== null && a.trim().toLowerCase() === answer)) &&
    (!text || r.text.toLowerCase().includes(text));
}

export async function searchEpisodes(ctx: UiContext, runId: string, q: SearchQuery): Promise<SearchResult> {
  checkRunId(runId);
  const { records } = await stepRecords(ctx.cfg, runId);
  const steps = q.step === undefined ? records : records.filter((r) => r.step === q.step);
  const src = await rowSource(ctx, runId);
  const matches = matcher(q);
  const found: IndexedRow[] = [];
  // step by step: a run's first search reads each step's samples once, a few at a time
  for (const rec of steps) for (const r of await recordedRows(ctx, rec, src)) if (matches(r)) found.push(r);
  return {
    run_id: runId,
    total: found.length,
    offset: q.offset,
    limit: q.limit,
    steps_searched: steps.length,
    rows: found.slice(q.offset, q.offset + q.limit).map((r) => ({ ...publicRow(r), excerpt: excerpt(r.text, q.text) })),
  };
}
