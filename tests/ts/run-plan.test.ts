// Pure parts of the training run: prompt order (no prompt skipped or repeated across resumes),
// the zero-std group filter, step metrics, the initial run state.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { epochPermutation, selectPrompts, type DataCursor } from '../../lib/prompt-order.js';
import { TrainHyper } from '../../lib/contract.js';
import { initialRunState } from '../../config/run-plan.js';
import { groupFilter, rolloutMetrics } from '../../workflows/rollout-metrics.js';
import { scheduledLr } from '../../workflows/sft-metrics.js';
import type { EpisodeSummary } from '../../protocol/episode.js';

test('each epoch is a seeded permutation; seeds and epochs differ', () => {
  const p = epochPermutation(50, 7, 0);
  assert.deepEqual(
    [...p].sort((a, b) => a - b),
    Array.from({ length: 50 }, (_, i) => i),
  );
  assert.deepEqual(epochPermutation(50, 7, 0), p);
  assert.notDeepEqual(epochPermutation(50, 7, 1), p);
  assert.notDeepEqual(epochPermutation(50, 8, 0), p);
});

test('stepping with a cursor covers every prompt once per epoch, however the run is cut', () => {
  const size = 23;
  for (const perStep of [1, 4, 5, 23]) {
    let at: DataCursor = { epoch: 0, cursor: 0 };
    const seen: number[] = [];
    while (seen.length < size * 3) {
      // a "resume" is just calling again from the saved cursor
      const { indices, next } = selectPrompts(size, 3, at, perStep);
      seen.push(...indices);
      at = JSON.parse(JSON.stringify(next));
    }
    for (let e = 0; e < 3; e++) {
      const epoch = seen.slice(e * size, (e + 1) * size);
      assert.deepEqual(
        [...epoch].sort((a, b) => a - b),
        Array.from({ length: size }, (_, i) => i),
        `perStep ${perStep}, epoch ${e}`,
      );
      assert.deepEqual(epoch, epochPermutation(size, 3, e));
    }
  }
  assert.throws(() => selectPrompts(0, 1, { epoch: 0, cursor: 0 }, 1), /empty/);
});

const ep = (id: string, reward: number, status: EpisodeSummary['status'] = 'COMPLETED'): EpisodeSummary => ({
  episode_id: id,
  sample_ref: status === 'FAILED' ? '' : `blob:named/samples/${id}.json`,
  reward,
  status,
  truncated_reason: null,
  response_len: 10,
  turns: 1,
  weight_version: 0,
});

test('zero-std filter drops all-equal groups only when enabled; failed episodes never train', () => {
  const eps = [
    ep('r/0/0/0', 1),
    ep('r/0/0/1', 1),
    ep('r/0/1/0', 0),
    ep('r/0/1/1', 1),
    ep('r/0/2/0', 0, 'FAILED'),
    ep('r/0/2/1', 1),
  ];
  const off = groupFilter(eps, false);
  assert.equal(off.kept.length, 5);
  assert.equal(off.failed, 1);
  const on = groupFilter(eps, true);
  assert.deepEqual(
    on.kept.map((e) => e.episode_id),
    ['r/0/1/0', 'r/0/1/1'],
  );
  assert.equal(on.dropped_zero_std, 3); // group 0 (two 1s) and the lone usable member of group 2
  const m = rolloutMetrics(eps, on);
  assert.equal(m['rollout/raw_reward'], 4 / 5);
  assert.equal(m['rollout/failed'], 1);
  assert.equal(m['rollout/n_trained'], 2);
});

test('the initial run state carries the plan; a bad run id is refused', () => {
  const cfg = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'rollout.prompts_per_step=3', 'grpo.lr=0.5'] });
  const s = initialRunState(cfg, 'r1');
  assert.equal(s.step, 0);
  assert.equal(s.engines_synced, false);
  assert.equal(s.plan.prompts_per_step, 3);
  assert.equal(s.plan.hyper.lr, 0.5);
  assert.equal(s.plan.hyper.compute_dtype, 'float32');
  assert.equal(
    initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.dtype=bfloat16'] }), 'r2').plan.hyper
      .compute_dtype,
    'bfloat16',
  );
  assert.equal(s.plan.run_dir, '/tmp/x/runs/r1');
  assert.equal(
    s.plan.eval_episode.temperature,
    s.plan.episode.temperature,
    'eval samples at the rollout temperature unless run.eval_temperature says',
  );
  assert.equal(
    initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'run.eval_temperature=0'] }), 'r3').plan
      .eval_episode.temperature,
    0,
  );
  assert.throws(() => initialRunState(cfg, '../evil'), /run id/);
});

test("the plan sends every hyper-parameter from the config: the trainer's defaults are never load-bearing", () => {
  const sets = [
    'state_dir=/tmp/x',
    'grpo.kl.enabled=true',
    'grpo.kl.coef=0.2',
    'grpo.tis.enabled=true',
    'grpo.ppo_epochs=2',
    'rollout.temperature=0.7',
  ];
  const plan = initialRunState(loadConfig({ env: {}, sets }), 'r1').plan;
  const fields = Object.keys(TrainHyper.parse({})).sort();
  assert.deepEqual(Object.keys(plan.hyper).sort(), fields, 'every field, none left to a default');
  assert.deepEqual(
    [
      plan.hyper.kl.coef,
      plan.hyper.tis.enabled,
      plan.hyper.tis.mode,
      plan.hyper.ppo_epochs,
      plan.hyper.temperature,
      plan.hyper.routing_replay,
    ],
    [0.2, true, 'truncate', 2, 0.7, false],
  );
  assert.deepEqual(TrainHyper.parse(plan.hyper), plan.hyper, 'the plan passes the wire contract as it is');
  for (const key of ['lr_warmup_steps', 'lr_schedule', 'zero_std_filter'])
    assert.equal(key in plan.hyper, false, `${key} is the workflow's`);
  const sft = initialRunState(
    loadConfig({ env: {}, sets: [...sets, 'algorithm=sft', 'sft.path=/tmp/x.jsonl', 'sft.lr=0.25'] }),
    'r2',
  ).plan;
  assert.equal(sft.hyper.lr, 0.25);
  assert.deepEqual(
    [sft.checkpoint_interval, sft.keep_checkpoint_every, sft.sft_render_ahead, sft.lr_warmup_steps],
    [1, 0, true, 0],
  );
});

test('GRPO lr warm-up: linear to grpo.lr over lr_warmup_steps, then constant', () => {
  const plan = (sets: string[]) =>
    initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'grpo.lr=0.004', ...sets] }), 'r1').plan;
  const p = plan(['grpo.lr_warmup_steps=3']);
  assert.equal(p.lr_warmup_steps, 3);
  assert.deepEqual(
    [0, 1, 2, 3, 9].map((step) => scheduledLr(p.hyper.lr, p.lr_schedule, step, 10, p.lr_warmup_steps)),
    [0.001, 0.002, 0.003, 0.004, 0.004],
  );
  assert.equal(plan([]).lr_warmup_steps, 0);
  assert.equal(scheduledLr(0.004, undefined, 0, 10, undefined), 0.004);
  assert.throws(() => plan(['grpo.lr_warmup_steps=-1']), /grpo\.lr_warmup_steps/);
});

test('lr schedule wsd: constant, then linearly down to a tenth over the last fifth of the steps', () => {
  const lr = (step: number) => scheduledLr(0.01, 'wsd', step, 101);
  for (const step of [0, 50, 80]) assert.equal(lr(step), 0.01, `step ${step} is in the stable part`);
  assert.ok(Math.abs(lr(90) - 0.0055) < 1e-12, `half-way down the decay: ${lr(90)}`);
  assert.ok(Math.abs(lr(100) - 0.001) < 1e-12, `the last step: ${lr(100)}`);
  const sft = initialRunState(
    loadConfig({
      env: {},
      sets: ['state_dir=/tmp/x', 'algorithm=sft', 'sft.path=/tmp/x.jsonl', 'sft.lr_schedule=wsd'],
    }),
    'r1',
  ).plan;
  assert.equal(sft.lr_schedule, 'wsd');
});

test('lr schedule: cosine from the end of the warm-up down to a tenth at the last step; SFT and GRPO each take their own key', () => {
  const plan = (sets: string[]) =>
    initialRunState(
      loadConfig({
        env: {},
        sets: ['state_dir=/tmp/x', 'grpo.lr=0.004', 'sft.lr=0.008', 'sft.path=/tmp/x.jsonl', ...sets],
      }),
      'r1',
    ).plan;
  const p = plan(['grpo.lr_warmup_steps=3', 'grpo.lr_schedule=cosine']);
  assert.equal(p.lr_schedule, 'cosine');
  const lrs = Array.from({ length: 10 }, (_, step) =>
    scheduledLr(p.hyper.lr, p.lr_schedule, step, 10, p.lr_warmup_steps),
  );
  assert.deepEqual(lrs.slice(0, 4), [0.001, 0.002, 0.003, 0.004], 'the warm-up, then the peak');
  assert.ok(Math.abs(lrs[9]! - 0.0004) < 1e-12, `a tenth at the last step: ${lrs[9]}`);
  assert.ok(
    lrs.slice(3).every((lr, i, a) => i === 0 || lr < a[i - 1]!),
    `decays after the warm-up: ${lrs}`,
  );
  assert.equal(
    plan(['algorithm=sft', 'grpo.lr_schedule=cosine']).lr_schedule,
    'constant',
    'an SFT run takes sft.lr_schedule',
  );
  const sft = plan(['algorithm=sft', 'sft.lr_schedule=cosine']);
  assert.equal(sft.lr_schedule, 'cosine');
  assert.equal(
    scheduledLr(sft.hyper.lr, sft.lr_schedule, 0, 100, sft.lr_warmup_steps),
    0.008,
    'no warm-up: the peak at step 0',
  );
  assert.equal(plan([]).lr_schedule, 'constant');
  assert.throws(() => plan(['grpo.lr_schedule=linear']), /grpo\.lr_schedule/);
});
