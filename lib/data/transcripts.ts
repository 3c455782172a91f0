// Multi-turn tool transcripts for SFT, synthesised from any dataset with known answers: the prompt
// an episode would get, then calc_score calls answered by the real Geo3K environment (its feedback
// text, its last-chance message) until the answer is right or the turns run out. A transcript's first
// answer is right with probability `first_correct`, else another row's answer; after a wrong answer
// the next is drawn among the answers not tried yet, so wrong-then-right transcripts teach the use of
// feedback without teaching which answer is right. Optionally a share of the transcripts answer by
// habit (`habit`): the same answers whatever the figure, in the same order, and after a wrong one only
// sometimes the right answer (`habit_recheck`) — the behaviour GRPO unlearns in the demo (docs/tasks.md).
// `recheck` is that chance for the other transcripts (unset: the next answer is drawn like any other).
import { geo3kStep } from '../env/geo3k.js';
import type { RewardMatch } from '../math/options.js';
import { seededRandom } from '../prompt-order.js';
import type { BlobStore } from '../../stores/blobstore.js';
import { localBlobPath } from '../blob-store-config.js';
import { buildMessages } from './prompt.js';
import type { PromptRow } from './rows.js';
import type { SftRecord } from './sft.js';

/** Copies of one row: past a few dozen no answer draw repeats often enough to matter (the demo's warm
 *  start uses ~35); far more is a typo. */
export const MAX_PER_ROW = 10_000;
/** Transcripts of one call: all are built in memory before they are written (a few KB each). */
export const MAX_TRANSCRIPTS = 250_000;

/** Why `per_row` copies of `rows` rows cannot be built, or null. */
export function transcriptCountProblem(rows: number, perRow: number): string | null {
  if (!Number.isInteger(perRow) || perRow < 1) return `per_row must be a positive integer, got ${perRow}`;
  if (perRow > MAX_PER_ROW) return `per_row ${perRow} is more than ${MAX_PER_ROW} copies of a row`;
  if (rows * perRow > MAX_TRANSCRIPTS)
    return `per_row ${perRow} × ${rows} rows is ${rows * perRow} transcripts, more than ${MAX_TRANSCRIPTS} (they are built in memory before they are written)`;
  return null;
}

/** Why a habit's answers cannot be used, or null: an empty (or padded) answer would be a calc_score
 *  call the tool refuses, and the transcripts would teach that broken call. */
export function habitProblem(answers: readonly string[]): string | null {
  if (answers.length === 0) return 'no answers';
  const i = answers.findIndex((a) => a.trim() !== a || a === '');
  if (i < 0) return null;
  const a = answers[i]!;
  return `answer ${i + 1} of ${answers.length} is ${a.trim() === '' ? 'empty' : `${JSON.stringify(a)}, padded with whitespace`} (a calc_score call needs an answer; the transcripts would teach a broken call)`;
}

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
  /** Answers given by habit, in order (the first not tried yet), whatever the figure: in the demo, answers
   *  true of figures but right for no question asked (docs/tasks.md, "answers by habit"). Unset: none. */
  habit?: string[];
  /** The share of transcripts that answer by habit (default 1 when `habit` is set); the others draw as above. */
  habit_share?: number;
  /** In a habitual transcript, the chance that a turn after a wrong answer answers right instead (default 0). */
  habit_recheck?: number;
  /** In a transcript not by habit, the chance that a turn after a wrong answer answers right (default:
   *  a draw among the answers not tried yet, like any other). */
  recheck?: number;
}

/** The assistant text of one calc_score call, as the chat template writes a tool call. */
export function calcScoreCall(answer: string): string {
  return `<tool_call>\n{"name": "calc_score", "arguments": {"answer": ${JSON.stringify(answer)}}}\n</tool_call>`;
}

/** Flattens image parts to "<image>" (the ShareGPT / LLaMA-Factory form of sft-export). */
function flatten(content: string | Array<{ type: string; text?: string }> | null): string {
  return content === null
    ? ''
    : typeof content === 'string'
      ? content
      : content.map((p) => (p.type === 'text' ? (p.text ?? '') : '<image>')).join('');
}

export function toolTranscript(
  row: PromptRow,
  candidates: string[],
  store: BlobStore,
  opts: TranscriptOptions,
  r: () => number,
): SftRecord {
  const built = buildMessages(row, { tools: true, systemPrompt: opts.systemPrompt });
  const messages: SftRecord['messages'] = built.messages.map((m) => ({
    role: m.role as 'system' | 'user',
    content: flatten(m.content),
  }));
  const wrong = [...new Set(candidates)].filter((c) => c !== row.answer);
  const pool = [row.answer, ...wrong];
  const firstCorrect = opts.first_correct ?? 1 / pool.length;
  const tried = new Set<string>();
  const habitual = (opts.habit?.length ?? 0) > 0 && r() >= 1 - (opts.habit_share ?? 1);
  for (let turn = 1; turn <= opts.max_turns; turn++) {
    const untried = pool.filter((c) => !tried.has(c));
    if (untried.length === 0) break;
    const recheckShare = (habitual ? opts.habit_recheck : opts.recheck) ?? 0;
    const recheck = turn > 1 && recheckShare > 0 && r() < recheckShare;
    const byHabit = habitual && !recheck ? opts.habit!.find((a) => !tried.has(a)) : undefined;
    const draw = () =>
      turn > 1
        ? untried[Math.floor(r() * untried.length)]!
        : r() < firstCorrect || wrong.length === 0
          ? row.answer
          : wrong[Math.floor(r() * wrong.length)]!;
    const guess = recheck ? row.answer : (byHabit ?? draw());
    tried.add(guess);
    const text = calcScoreCall(guess);
    messages.push({ role: 'assistant', content: text });
    const env = geo3kStep({
      text,
      label: row.answer,
      turn,
      max_turns: opts.max_turns,
      match: opts.match,
      tolerance: opts.tolerance,
    });
    if (env.done || env.observation === null) break;
    messages.push({ role: 'user', content: env.observation });
  }
  return {
    id: row.id,
    messages,
    images: row.images.map((ref) => localBlobPath(store, ref, 'an SFT transcript export')),
    tools: built.tools,
  };
}

/** `per_row` transcripts per row, a pass over all rows at a time (the same seed gives the same
 *  transcripts); wrong answers come from the other rows. Ids: the row's, then `#k` for k ≥ 1. */
export function toolTranscripts(rows: PromptRow[], store: BlobStore, opts: TranscriptOptions): SftRecord[] {
  const perRow = opts.per_row ?? 1;
  const problem = transcriptCountProblem(rows.length, perRow) ?? (opts.habit ? habitProblem(opts.habit) : null);
  if (problem) throw new Error(problem);
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
