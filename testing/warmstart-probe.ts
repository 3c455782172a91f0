// The warm start's first answer, read off the engine's distribution instead of sampled: for every
// prompt of a split, the probability of each first digit right after `{"answer": "` in the first
// calc_score call, with the prompt rendered exactly as an episode renders it. On the angle-facts task
// no right answer starts with 1, so P(first digit 1) is the habit's share ("180"), and P(the right
// answer's first digit) bounds the first answer's chance of being right. No sampling: the same weights
// give the same numbers, so a test can hold a warm start to bounds (tests/ts/demo-warmstart.test.ts)
// and bench/warmstart-probe.ts can follow one step by step.
import type { TempoConfig } from '../config/schema.js';
import type { VllmClient } from '../engine/client.js';
import { loadDataset, mapLimited } from '../lib/data/load.js';
import { buildMessages } from '../lib/data/prompt.js';
import { resolveImageUrls } from '../lib/data/prompt-images.js';
import type { PromptRow } from '../lib/data/rows.js';
import type { BlobStore } from '../stores/blobstore.js';

const PREFIX = '<tool_call>\n{"name": "calc_score", "arguments": {"answer": "';

export interface AnswerProbe {
  n: number;
  /** Mean P(the right first digit). */
  right: number;
  /** Mean P(first digit 1): the habit. */
  habit: number;
}

export interface SplitProbe {
  rows: number;
  p_habit: number;
  p_right: number;
  /** The first answer's chance of being right when it is not the habit: P(right digit) / (1 − P(habit)). */
  p_right_not_habit: number;
  /** By the row's answer (on angle-facts, one answer a figure kind). */
  by_answer: Record<string, AnswerProbe>;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
const round = (x: number) => Math.round(x * 1000) / 1000;

/** Probes the model `client` serves on one split of `cfg`'s dataset. */
export async function probeFirstAnswer(
  client: VllmClient,
  cfg: TempoConfig,
  store: BlobStore,
  split: 'train' | 'eval',
): Promise<SplitProbe> {
  const digitIds = new Map<number, string>();
  for (let d = 0; d <= 9; d++) digitIds.set((await client.tokenize(String(d)))[0]!, String(d));
  const firstDigit = async (row: PromptRow): Promise<Record<string, number>> => {
    const built = buildMessages(row, { tools: true, systemPrompt: cfg.dataset.system_prompt });
    const messages = [
      ...(await resolveImageUrls(built.messages, store)),
      { role: 'assistant' as const, content: PREFIX },
    ];
    const r = await client.renderChat({
      messages,
      tools: built.tools,
      addGenerationPrompt: false,
      continueFinalMessage: true,
    });
    const res = await fetch(`${client.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        token_ids: r.tokenIds,
        ...(r.features ? { features: r.features } : {}),
        sampling_params: { max_tokens: 1, temperature: 1, logprobs: 20 },
      }),
    });
    if (!res.ok) throw new Error(`${client.url}/inference/v1/generate answered ${res.status}: ${await res.text()}`);
    const body = (await res.json()) as {
      choices: Array<{ logprobs: { content: Array<{ top_logprobs: Array<{ token_id: number; logprob: number }> }> } }>;
    };
    const out: Record<string, number> = {};
    for (const t of body.choices[0]!.logprobs.content[0]!.top_logprobs) {
      const digit = digitIds.get(t.token_id);
      if (digit !== undefined) out[digit] = (out[digit] ?? 0) + Math.exp(t.logprob);
    }
    return out;
  };
  const { rows } = await loadDataset(cfg.dataset, split, store, cfg.rollout.environment);
  const probs = await mapLimited(rows, 4, firstDigit);
  const habit = probs.map((p) => p['1'] ?? 0);
  const right = probs.map((p, i) => p[rows[i]!.answer[0]!] ?? 0);
  const byAnswer: Record<string, AnswerProbe> = {};
  rows.forEach((row, i) => {
    const a = (byAnswer[row.answer] ??= { n: 0, right: 0, habit: 0 });
    a.n += 1;
    a.right += right[i]!;
    a.habit += habit[i]!;
  });
  for (const a of Object.values(byAnswer)) {
    a.right = round(a.right / a.n);
    a.habit = round(a.habit / a.n);
  }
  return {
    rows: rows.length,
    p_habit: round(mean(habit)),
    p_right: round(mean(right)),
    p_right_not_habit: round(mean(right.map((p, i) => p / Math.max(1e-9, 1 - habit[i]!)))),
    by_answer: byAnswer,
  };
}
