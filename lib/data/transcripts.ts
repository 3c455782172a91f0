// Multi-turn tool transcripts for SFT, synthesised from any dataset with known answers: the prompt
// an episode would get, then calc_score calls answered by the real Geo3K environment (its feedback
// text, its last-chance message) until the answer is right or the turns run out. A transcript's first
// answer is right with probability `first_correct`, else another row's answer; after a wrong answer
// the next is drawn among the answers not tried yet, so wrong-then-right transcripts teach the use of
// feedback without teaching which answer is right. Optionally (`reasoned`) a turn first states why and
// answers right, and (`hasty`) the other turns answer by habit.
import { geo3kStep } from '../env/geo3k.js';
import { ANGLE_FACTS } from './synth-angles.js';
import type { RewardMatch } from '../math/options.js';
import { seededRandom } from '../prompt-order.js';
import type { BlobStore } from '../blobstore.js';
import { localBlobPath } from '../blob-store-config.js';
import { buildMessages } from './prompt.js';
import type { PromptRow } from './rows.js';
import type { SftRecord } from './sft.js';

export interface TranscriptOptions {
  max_turns: number;
  /** Probability that the first answer is the right one. Default: that of a uniform guess among the candidates. */
  first_correct?: number;
  seed: number;
  systemPrompt?: string;
  /** Transcripts per row, each with its own draws (default 1): with several, no answer choice repeats
   *  often enough to be memorised, so what SFT can learn of the answers is the rule, not the noise. */
  per_row?: number;
  /** The grader settings of the run (rollout.reward_match / reward_tolerance), so feedback matches the RL episodes'. */
  match?: RewardMatch;
  tolerance?: number;
  /** Probability that a turn first states why (`reasoning`'s sentence), then calls with the right answer;
   *  the other turns call at once with an answer drawn as above. 0 or unset: every turn calls at once. */
  reasoned?: number;
  /** The sentence of a reasoned turn for a row (its answer included). Default: "The answer is X." */
  reasoning?: (row: PromptRow) => string;
  /** The turns that do not reason answer the first of these not tried yet: a habit, not a draw
   *  (docs/tasks.md, "careful or hasty turns"). */
  hasty?: string[];
}

/** The assistant text of one calc_score call, as the chat template writes a tool call. */
export function calcScoreCall(answer: string): string {
  return `<tool_call>\n{"name": "calc_score", "arguments": {"answer": ${JSON.stringify(answer)}}}\n</tool_call>`;
}

const defaultReasoning = (row: PromptRow) => `The answer is ${row.answer}.`;

/** The sentence of a reasoned turn for a dataset's rows: the figure's fact for the angle-facts task, else
 *  the default. */
export function reasoningFor(dataset: { kind: string; synthetic_task?: string }): (row: PromptRow) => string {
  if (dataset.kind !== 'synthetic' || dataset.synthetic_task !== 'angle_facts') return defaultReasoning;
  return (row) => ANGLE_FACTS[row.answer as keyof typeof ANGLE_FACTS] ?? defaultReasoning(row);
}

/** Flattens image parts to "<image>" (the ShareGPT / LLaMA-Factory form of sft-export). */
function flatten(content: string | Array<{ type: string; text?: string }> | null): string {
  return content === null ? '' : typeof content === 'string' ? content : content.map((p) => (p.type === 'text' ? p.text ?? '' : '<image>')).join('');
}

export function toolTranscript(row: PromptRow, candidates: string[], store: BlobStore, opts: TranscriptOptions, r: () => number): SftRecord {
  const built = buildMessages(row, { tools: true, systemPrompt: opts.systemPrompt });
  const messages: SftRecord['messages'] = built.messages.map((m) => ({ role: m.role as 'system' | 'user', content: flatten(m.content) }));
  const wrong = [...new Set(candidates)].filter((c) => c !== row.answer);
  const pool = [row.answer, ...wrong];
  const firstCorrect = opts.first_correct ?? 1 / pool.length;
  const tried = new Set<string>();
  for (let turn = 1; turn <= opts.max_turns; turn++) {
    const untried = pool.filter((c) => !tried.has(c));
    if (untried.length === 0) break;
    const reasoned = (opts.reasoned ?? 0) > 0 && r() < opts.reasoned!;
    const draw = () =>
      turn > 1 ? untried[Math.floor(r() * untried.length)]! : r() < firstCorrect || wrong.length === 0 ? row.answer : wrong[Math.floor(r() * wrong.length)]!;
    const guess = reasoned ? row.answer : (opts.hasty?.find((a) => !tried.has(a)) ?? draw());
    tried.add(guess);
    const call = calcScoreCall(guess);
    const text = reasoned ? `${(opts.reasoning ?? defaultReasoning)(row)}\n${call}` : call;
    messages.push({ role: 'assistant', content: text });
    const env = geo3kStep({ text, label: row.answer, turn, max_turns: opts.max_turns, match: opts.match, tolerance: opts.tolerance });
    if (env.done || env.observation === null) break;
    messages.push({ role: 'user', content: env.observation });
  }
  return { id: row.id, messages, images: row.images.map((ref) => localBlobPath(store, ref, 'an SFT transcript export')), tools: built.tools };
}

/** `per_row` transcripts per row, a pass over all rows at a time (the same seed gives the same
 *  transcripts); wrong answers come from the other rows. Ids: the row's, then `#k` for k ≥ 1. */
export function toolTranscripts(rows: PromptRow[], store: BlobStore, opts: TranscriptOptions): SftRecord[] {
  const perRow = opts.per_row ?? 1;
  if (!Number.isInteger(perRow) || perRow < 1) throw new Error(`per_row must be a positive integer, got ${perRow}`);
  const r = seededRandom(opts.seed);
  const candidates = rows.map((row) => row.answer);
  const out: SftRecord[] = [];
  for (let k = 0; k < perRow; k++)
    for (const row of rows) {
      const t = toolTranscript(row, candidates, store, opts, r);
      out.push(k === 0 ? t : { ...t, id: `${t.id}#${k}` });
    }
  return out;
}
