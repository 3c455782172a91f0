// Kill-and-resume certification, CI's subset (docs/certification.md; the whole matrix is in the long
// tier and bench/certify.ts): a deterministic synchronous two-step run, and the same run with
// the rollout worker SIGKILLed after a generation whose result was not yet recorded and at a
// continue-as-new, the trainer half-way through a train step (its standby takes over), and the Temporal
// server half-way through a weight sync.
// The killed run must finish with each sample trained once and equal the reference bit for bit: the
// same episodes, the same tokens, logprobs and rewards in every sample, the same metrics, the same weights.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { certify, certifySets, certTable, ciSubset } from '../../testing/certify-matrix.js';
import { type Fingerprint, differences, engineLogprobsOnly, whereLogprobsPart } from '../../testing/certify.js';
import { type TestEngines, testEngines } from '../../testing/engines.js';

let engines: TestEngines;
before(async () => {
  engines = await testEngines(1, { sets: ['run.deterministic=true'] });
});
after(async () => {
  await engines?.stop();
});

test('a deterministic run killed at four points (rollout worker, trainer, Temporal server) equals the run never killed, each sample trained once', {
  timeout: 1_200_000,
}, async () => {
  const { rows, diffs } = await certify(engines, 'sync', ciSubset(), {
    sets: [...certifySets('sync', 2), 'run.eval_interval=0'],
  });
  console.log(certTable(rows));
  for (const row of rows) assert.ok(row.fired, `kill point ${row.kill} was reached`);
  assert.deepEqual(diffs, { subset: [] }, 'the killed run equals the reference');
});

test("differences tell the engine's logprobs of the same tokens from other content, and from the training", () => {
  const step = (diff: number, loss = 0.5) => ({
    episodes: ['r/0/0/0'],
    trained: ['r/0/0/0'],
    metrics: { 'train/train_rollout_logprob_abs_diff': diff, 'train/loss': loss },
  });
  const ref: Fingerprint = {
    steps: [step(0.00055)],
    samples: { 'r/0/0/0': 'a' },
    samplesNoLogprobs: { 'r/0/0/0': 'x' },
    weights: 'w',
  };
  const logprobsOnly = { ...ref, steps: [step(0.00056)], samples: { 'r/0/0/0': 'b' } };
  const diffs = differences(ref, logprobsOnly);
  assert.deepEqual(diffs, [
    'step 0: train/train_rollout_logprob_abs_diff 0.00055 vs 0.00056',
    "sample r/0/0/0: the engine's logprobs only (same tokens, masks, reward and turns)",
  ]);
  assert.equal(engineLogprobsOnly(diffs), true);
  const otherTokens = { ...logprobsOnly, samplesNoLogprobs: { 'r/0/0/0': 'y' } };
  assert.deepEqual(differences(ref, otherTokens).slice(1), ['sample r/0/0/0: other content']);
  assert.equal(engineLogprobsOnly(differences(ref, otherTokens)), false);
  assert.equal(engineLogprobsOnly(differences(ref, { ...logprobsOnly, steps: [step(0.00056, 0.6)] })), false);
  assert.equal(engineLogprobsOnly(differences(ref, { ...logprobsOnly, weights: 'v' })), false);
  assert.equal(engineLogprobsOnly([]), false, 'identical is not "logprobs only"');
  const trainerMoved = differences(ref, { ...ref, steps: [step(0.00056)] });
  assert.deepEqual(trainerMoved, ['step 0: train/train_rollout_logprob_abs_diff 0.00055 vs 0.00056']);
  assert.equal(engineLogprobsOnly(trainerMoved), false, "every sample the same: the trainer's logprobs moved");
});

test("where two samples' engine logprobs part: how many of the model's tokens, the first as turn and token, the largest |Δ|", () => {
  // two turns of the model's two tokens each, an observation of two between them
  const a = { rollout_logprobs: [-1, -2, 0, 0, -3, -4], loss_mask: [1, 1, 0, 0, 1, 1] };
  const b = { rollout_logprobs: [-1, -2, 0, 0, -3, -4.5] };
  assert.equal(whereLogprobsPart(a, b), '1 of 4 tokens, the first at turn 2 token 1, max |Δ| 0.50');
  assert.equal(whereLogprobsPart(a, a), '0 of 4 tokens, none, max |Δ| 0.0');
  const ref: Fingerprint = {
    steps: [],
    samples: { s: 'a' },
    samplesNoLogprobs: { s: 'x' },
    logprobs: { s: a },
    weights: 'w',
  };
  const diffs = differences(ref, { ...ref, samples: { s: 'b' }, logprobs: { s: { ...a, ...b } } });
  assert.deepEqual(diffs, [
    "sample s: the engine's logprobs only (same tokens, masks, reward and turns): 1 of 4 tokens, the first at turn 2 token 1, max |Δ| 0.50",
  ]);
  assert.equal(engineLogprobsOnly(diffs), true);
});
