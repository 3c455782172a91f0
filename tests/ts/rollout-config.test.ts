// Rollout settings the trainer cannot match are refused with a clear message; the settings it can
// match travel in the trainer contract; a workflow run's length is bounded.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_STEPS_PER_WORKFLOW_RUN, RolloutConfig, RunConfig } from '../../config/schema.js';
import { TrainHyper } from '../../lib/contract.js';

test('top_p < 1 is refused: the trainer would score a different distribution than the engine sampled', () => {
  assert.equal(RolloutConfig.parse({}).top_p, 1);
  const r = RolloutConfig.safeParse({ top_p: 0.9 });
  assert.equal(r.success, false);
  assert.match(r.error!.issues[0]!.message, /top_p < 1 is not supported.*trainer recomputes the full softmax/);
  assert.deepEqual(r.error!.issues[0]!.path, ['top_p']);
});

test('allowed_token_ids travel to the trainer in the hyper-parameters', () => {
  const hyper = { lr: 1e-6, eps_clip: 0.2, eps_clip_high: 0.28, dr_grpo: false, kl: { enabled: false, coef: 0, type: 'low_var_kl' }, entropy_coef: 0, tis: { enabled: false, clip: 2 }, loss_agg: 'sample_mean', micro_batch_tokens: 8192, grad_clip: 1, temperature: 1, weight_decay: 0 };
  assert.deepEqual(TrainHyper.parse({ ...hyper, allowed_token_ids: [64, 65] }).allowed_token_ids, [64, 65]);
  assert.equal(TrainHyper.parse(hyper).allowed_token_ids, undefined);
});

test(`steps_per_workflow_run is bounded (${MAX_STEPS_PER_WORKFLOW_RUN}): a run's history stays far from Temporal's 50k events`, () => {
  assert.equal(RunConfig.parse({ steps_per_workflow_run: MAX_STEPS_PER_WORKFLOW_RUN }).steps_per_workflow_run, MAX_STEPS_PER_WORKFLOW_RUN);
  const r = RunConfig.safeParse({ steps_per_workflow_run: 50 });
  assert.equal(r.success, false);
  assert.match(r.error!.issues[0]!.message, /at most 5.*50k/);
});
