// The warm start's first answer, read off its distribution instead of sampled (prints numbers; not a
// test): for every prompt of the train and the held-out split of the demo's dataset, the engine's
// probability of each first digit right after `{"answer": "` in the first calc_score call, with the
// prompt rendered exactly as an episode renders it. On the angle-facts task no right answer starts
// with 1, so P(first digit 1) is the habit's share ("180"), and P(the right answer's first digit) bounds
// the first answer's chance of being right. Both splits should agree: a warm start that answers the
// train split better than the held-out one has learnt its problems, not the figure → answer rule.
//
//   node --import tsx bench/warmstart-probe.ts --engine URL [--model DIR]… [--config configs/cpu-tiny.yaml] [--json]
//
// URL: an engine serving the model to probe (e.g. `tempo-rl --set model.path=DIR --set
// engines.base_port=8200 engine start` with a state dir of its own). Each --model DIR (a model
// directory of the same architecture, e.g. the SFT run's checkpoints) is loaded into that engine in
// turn and probed: the warm start step by step.
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../config/load.js';
import { VllmClient } from '../engine/client.js';
import { loadDataset, mapLimited } from '../lib/data/load.js';
import { buildMessages } from '../lib/data/prompt.js';
import { resolveImageUrls } from '../lib/data/prompt-images.js';
import type { PromptRow } from '../lib/data/rows.js';
import { stateLayout } from '../lib/paths.js';
import { LocalBlobStore } from '../stores/blobstore.js';

const { values } = parseArgs({
  options: {
    engine: { type: 'string' },
    config: { type: 'string', default: 'configs/cpu-tiny.yaml' },
    model: { type: 'string', multiple: true, default: [] },
    json: { type: 'boolean', default: false },
  },
});
if (!values.engine) throw new Error('--engine URL is required');
const cfg = loadConfig({ file: values.config, env: process.env });
const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
const client = new VllmClient({ url: values.engine });
const PREFIX = '<tool_call>\n{"name": "calc_score", "arguments": {"answer": "';
const digitIds = new Map<number, string>();
for (let d = 0; d <= 9; d++) digitIds.set((await client.tokenize(String(d)))[0]!, String(d));

/** P(first digit) of the first answer for one row. */
async function firstDigit(row: PromptRow): Promise<Record<string, number>> {
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
  const res = await fetch(`${values.engine}/inference/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      token_ids: r.tokenIds,
      ...(r.features ? { features: r.features } : {}),
      sampling_params: { max_tokens: 1, temperature: 1, logprobs: 20 },
    }),
  });
  const body = (await res.json()) as {
    choices: Array<{ logprobs: { content: Array<{ top_logprobs: Array<{ token_id: number; logprob: number }> }> } }>;
  };
  const top = body.choices[0]!.logprobs.content[0]!.top_logprobs;
  const out: Record<string, number> = {};
  for (const t of top) {
    const digit = digitIds.get(t.token_id);
    if (digit !== undefined) out[digit] = (out[digit] ?? 0) + Math.exp(t.logprob);
  }
  return out;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
const round = (x: number) => Math.round(x * 1000) / 1000;

async function probe(): Promise<Record<string, unknown>> {
  const result: Record<string, unknown> = {};
  for (const split of ['train', 'eval'] as const) {
    const { rows } = await loadDataset(cfg.dataset, split, store, cfg.rollout.environment);
    const probs = await mapLimited(rows, 4, firstDigit);
    const habit = probs.map((p) => p['1'] ?? 0);
    const right = probs.map((p, i) => p[rows[i]!.answer[0]!] ?? 0);
    const byAnswer: Record<string, { n: number; right: number; habit: number }> = {};
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
    result[split] = {
      rows: rows.length,
      p_habit: round(mean(habit)),
      p_right: round(mean(right)),
      // the first answer's chance of being right when it is not the habit: P(right digit) / (1 − P(habit))
      p_right_not_habit: round(mean(right.map((p, i) => p / Math.max(1e-9, 1 - habit[i]!)))),
      by_answer: byAnswer,
    };
  }
  return result;
}

for (const dir of values.model.length ? values.model : [null]) {
  if (dir) {
    await client.reloadWeights(path.resolve(dir));
    await client.resetPrefixCache();
    // image features computed by the previous weights are cached too (trainer/weights/sync.py resets both)
    await fetch(`${client.url}/reset_encoder_cache`, { method: 'POST' });
  }
  const result = { model: dir, ...(await probe()) };
  if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else for (const [k, v] of Object.entries(result)) process.stdout.write(`${k}: ${JSON.stringify(v)}\n`);
}
