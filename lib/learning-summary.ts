// What a run learnt, read from its per-step metrics: the held-out eval before → after (the headline),
// the training reward as first half → second half with the spread of its steps (one step's mean over a
// few dozen sampled episodes moves by ±0.1 on its own), and how the policy used its tool. One reading
// for the HTML report (lib/report.ts) and the demo's printed summary (cli/demo-command.ts).

type Row = Record<string, number>;

export interface Spread {
  mean: number;
  /** Standard deviation of the step means (0 for one step). */
  sd: number;
  steps: number;
}

export interface LearningSummary {
  eval_before?: number;
  eval_after?: number;
  eval_prompts?: number;
  first_answer_before?: number;
  first_answer_after?: number;
  /** The training reward of the first and second half of the steps (the middle step, if odd, in neither). */
  reward_halves?: { first: Spread; second: Spread };
  episodes_per_step?: number;
  /** Shares of turns with a parseable calc_score call: all, first turns, later turns (after a wrong answer). */
  tool_calls?: { all: number; first_turns: number; later_turns: number | undefined };
  /** Mean share of episodes TRUNCATED per step. */
  truncated?: number;
  /** Step 0's rollout (the starting weights, before any update) beside the held-out eval before. */
  step0?: { reward: number; first_answer?: number; episodes?: number; prompts?: number };
}

const num = (v: number | undefined) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Centred moving mean over `radius` points each side (fewer at the ends). */
export function smoothed(ys: number[], radius = 1): number[] {
  return ys.map((_, i) => mean(ys.slice(Math.max(0, i - radius), i + radius + 1)));
}

function spread(xs: number[]): Spread {
  const m = mean(xs);
  return { mean: m, sd: Math.sqrt(mean(xs.map((x) => (x - m) ** 2))), steps: xs.length };
}

/** Tool use over all steps, the later turns' share derived from the per-step counts: a step's turns are
 *  rollout/turns × its episodes, of which one per episode is a first turn. */
function toolCalls(rows: Row[]): LearningSummary['tool_calls'] {
  let turns = 0,
    calls = 0,
    firsts = 0,
    firstCalls = 0;
  for (const r of rows) {
    const n = num(r['rollout/n_episodes']),
      perEpisode = num(r['rollout/turns']),
      rate = num(r['rollout/tool_call_rate']),
      first = num(r['rollout/first_turn_tool_call_rate']);
    if (n === undefined || perEpisode === undefined || rate === undefined || first === undefined) continue;
    const ok = n - (num(r['rollout/failed']) ?? 0);
    (turns += perEpisode * ok), (calls += rate * perEpisode * ok), (firsts += ok), (firstCalls += first * ok);
  }
  // Single-turn runs: one turn an episode and no tool.
  if (!firsts || (calls === 0 && turns === firsts)) return undefined;
  const later = turns - firsts;
  return {
    all: calls / turns,
    first_turns: firstCalls / firsts,
    later_turns: later >= 0.5 ? Math.min(1, Math.max(0, (calls - firstCalls) / later)) : undefined,
  };
}

export function learningSummary(rows: Row[]): LearningSummary {
  const start = rows.find((r) => num(r['eval_start/reward']) !== undefined) ?? {};
  const end = [...rows].reverse().find((r) => num(r['eval/reward']) !== undefined) ?? {};
  const rewards = rows.map((r) => num(r['rollout/raw_reward'])).filter((v): v is number => v !== undefined);
  const half = Math.floor(rewards.length / 2);
  const truncated = rows.map((r) => num(r['rollout/truncated_ratio'])).filter((v): v is number => v !== undefined);
  return {
    eval_before: num(start['eval_start/reward']),
    eval_after: num(end['eval/reward']),
    eval_prompts: num(end['eval/n']) ?? num(start['eval_start/n']),
    first_answer_before: num(start['eval_start/first_answer_correct']),
    first_answer_after: num(end['eval/first_answer_correct']),
    ...(half ? { reward_halves: { first: spread(rewards.slice(0, half)), second: spread(rewards.slice(-half)) } } : {}),
    episodes_per_step: num(rows[0]?.['rollout/n_episodes']),
    tool_calls: toolCalls(rows),
    ...(truncated.length ? { truncated: mean(truncated) } : {}),
    ...step0Of(rows[0]),
  };
}

function step0Of(r: Row | undefined): Pick<LearningSummary, 'step0'> {
  const reward = num(r?.['rollout/raw_reward']);
  if (reward === undefined) return {};
  return {
    step0: {
      reward,
      first_answer: num(r?.['rollout/first_answer_correct']),
      episodes: num(r?.['rollout/n_episodes']),
      prompts: num(r?.['rollout/n_groups']),
    },
  };
}

/** Half the width of a 95% interval of a mean of `n` 0/1 rewards around `p` from sampling alone (prompts
 *  that differ in difficulty widen it further). */
const sampling95 = (p: number, n: number) => 1.96 * Math.sqrt((p * (1 - p)) / Math.max(n, 1));

/** Why step 0's training reward need not match the held-out eval before, though both sample the same
 *  starting weights at the same temperature (docs/tasks.md "Reading the demo's numbers"). */
function step0Line(s: LearningSummary): string | undefined {
  const z = s.step0;
  if (!z || s.eval_before === undefined || !z.episodes) return undefined;
  const shape = z.prompts
    ? `${z.prompts} train prompts × ${Math.round(z.episodes / z.prompts)}`
    : `${z.episodes} episodes`;
  const evalN = s.eval_prompts ?? 0;
  const fa = (v: number | undefined) => (v === undefined ? '' : `, first answer right ${pct(v)}`);
  return (
    `step 0, before any update: training reward ${f2(z.reward)} on ${shape}${fa(z.first_answer)}; the held-out eval before: ` +
    `${f2(s.eval_before)} on ${evalN} prompts × 1${fa(s.first_answer_before)}. The same weights at the same temperature; ` +
    `each is a small sample (±${sampling95(z.reward, z.episodes).toFixed(2)} and ±${sampling95(s.eval_before, evalN).toFixed(2)} at 95% from sampling alone), ` +
    `and a step's few prompts are one draw of figures the starting policy answers unequally, so the two can differ by 0.3 with nothing learnt — ` +
    'the eval before and after scores the same prompts, so its difference is what was learnt'
  );
}

const f2 = (v: number | undefined) => (v === undefined ? 'n/a' : v.toFixed(2));
const pct = (v: number | undefined) => (v === undefined ? 'n/a' : `${(100 * v).toFixed(0)}%`);
const sp = (s: Spread) => `${s.mean.toFixed(2)} ± ${s.sd.toFixed(2)}`;

/** The summary in words, the headline first. */
export function headlineLines(s: LearningSummary): string[] {
  const lines = [
    `held-out eval reward: ${f2(s.eval_before)} before → ${f2(s.eval_after)} after training` +
      (s.first_answer_before !== undefined
        ? ` (first answer right ${pct(s.first_answer_before)} → ${pct(s.first_answer_after)}` +
          (s.eval_prompts ? `; ${s.eval_prompts} prompts never trained on)` : ')')
        : ''),
  ];
  const h = s.reward_halves;
  if (h)
    lines.push(
      `training reward, first ${h.first.steps} steps → last ${h.second.steps}: ${sp(h.first)} → ${sp(h.second)} (mean ± sd of the step means; ` +
        `noisy: each step is ${s.episodes_per_step ?? 'a few dozen'} sampled episodes, so single steps move by ±0.1 — read the halves, not one step)`,
    );
  const t = s.tool_calls;
  if (t)
    lines.push(
      `parseable calc_score calls: ${pct(t.all)} of turns — first turns ${pct(t.first_turns)}, turns after a wrong answer ${pct(t.later_turns)} ` +
        "(where the share falls it is mostly second turns: they follow a wrong answer and mostly stay wrong, so GRPO pushes their tokens down — the call's format with them — and the KL to the warm start pulls them back)",
    );
  const zero = step0Line(s);
  if (zero) lines.push(zero);
  if (s.truncated !== undefined) lines.push(`episodes TRUNCATED: ${pct(s.truncated)} a step on average`);
  return lines;
}
