// The demo on the real parts: the warm start is built through the durable SFT run (as
// `tempo-rl demo` does on a fresh machine), then the demo's multi-turn GRPO run (configs/cpu-tiny.yaml,
// 10 steps) samples real calc_score calls from the live vLLM engine, the Geo3K environment answers
// them, the default math RM pays — and the reward rises: the policy unlearns the warm start's habit
// (docs/tasks.md). The warm start comes from the config's model.warm_start, as in `tempo-rl train`. Longer and repeated runs: bench/warmstart-learning.ts.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { Sample } from '../../lib/contract.js';
import { stateLayout } from '../../stores/layout.js';
import { runHandle, startOrContinueRun } from '../../client/run-client.js';
import { checkInvariants } from '../../lib/trajectory.js';
import { waitForRun, withWarmStart } from '../../client/warm-start.js';
import { readStepRecords } from '../../activities/run.js';
import { runDir } from '../../stores/layout.js';
import type { RunResult } from '../../protocol/training-run.js';
import { IMAGE_PAD_ID as IMAGE_PAD } from '../../testing/engines.js';
import { checkExactlyOnce, startDemoRunFixture } from '../../testing/run.js';

const fx = await startDemoRunFixture(['model.warm_start=tool_transcripts']);
after(() => fx.close());

test('the warm-started policy calls calc_score, and GRPO on the demo task raises the reward and the held-out eval', {
  timeout: 1_800_000,
}, async () => {
  const { cfg, warm } = await withWarmStart(fx.client, fx.cfg, (id) => waitForRun(fx.client, id));
  assert.ok(warm && cfg.model.path === warm.model_dir, 'the run trains the warm start');
  const runId = 'demo-learning';
  await startOrContinueRun(fx.client, cfg, runId);
  const result = (await runHandle(fx.client, runId).result()) as RunResult;
  const records = await readStepRecords(runDir(cfg, runId));
  const rows = records.map((r) => r.metrics);
  const curve = rows.map((r) => r['rollout/raw_reward']!);
  const first = rows[0]!;
  const last = rows[rows.length - 1]!;
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  console.log(
    `demo learning: reward per step ${curve.map((r) => r.toFixed(3)).join(' ')}; eval ${first['eval_start/reward']} → ${last['eval/reward']}; ` +
      `first-turn tool calls ${first['eval_start/first_turn_tool_call_rate']}`,
  );

  // Built here, or by an earlier demo into the cache: the export records its SFT run's NLL either way.
  const about = JSON.parse(readFileSync(path.join(warm.model_dir, 'tempo_rl_warm_start.json'), 'utf8')) as {
    sft_nll_first: number;
    sft_nll_last: number;
  };
  assert.ok(
    about.sft_nll_last < about.sft_nll_first / 10,
    `the warm start's masked NLL fell: ${about.sft_nll_first} → ${about.sft_nll_last}`,
  );
  assert.ok(
    first['eval_start/first_turn_tool_call_rate']! >= 0.8,
    `the warm start writes a parseable calc_score call in ≥ 80% of first turns: ${first['eval_start/first_turn_tool_call_rate']}`,
  );
  // What the first demo lacked: rewards that differ within groups, so advantages and gradients are not 0.
  rows.forEach((r, step) => {
    assert.ok(r['train/grad_norm']! > 0, `step ${step}: grad_norm ${r['train/grad_norm']}`);
    assert.equal(r['train/nonfinite_step'], 0, `step ${step} is finite`);
  });
  assert.equal(rows.length, cfg.run.steps);
  // The demo's goal: the last two steps' mean reward ≥ 0.25 above the first two's, the held-out eval
  // +0.15. From the 140-step warm start, ten runs over prompt orders 0–9 met the reward in nine and the
  // eval in all; on the demo's own order (seed 0), shuffled, the reward in two of six draws, and this
  // test's run (its episodes seeded from its fixed run id) gave +0.23, eval +0.13 (seed 0's step 8 drew
  // the hard figures). With every step dealing the figure kinds in turn (the config's
  // rollout.prompt_order: stratified) ten draws of seed 0 met the reward, and this run gives +0.28,
  // eval 0.56 → 0.75 (docs/tasks.md, "Every step every figure kind").
  assert.ok(
    mean(curve.slice(-2)) >= mean(curve.slice(0, 2)) + 0.25,
    `the mean reward of the last two steps is ≥ 0.25 above the first two's: ${curve}`,
  );
  assert.ok(
    last['eval/reward']! >= first['eval_start/reward']! + 0.15,
    `the held-out eval rises by ≥ 0.15: ${first['eval_start/reward']} → ${last['eval/reward']}`,
  );

  // Every trained sample: token invariants, one image's placeholders in the prompt, the prompt a prefix of the sequence.
  const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
  let wrongThenDifferent = 0;
  let recovered = 0;
  for (const rec of records)
    for (const e of rec.episodes.filter((x) => x.trained)) {
      const sample = Sample.parse(await store.getJson(store.namedRef(`samples/${e.episode_id}.json`)));
      const inv = checkInvariants(
        sample,
        cfg.rollout.max_response_len * cfg.rollout.max_turns + cfg.rollout.max_context_len,
      );
      assert.ok(inv.ok, `${e.episode_id}: ${inv.problems.join('; ')}`);
      assert.equal(sample.images.length, 1, `${e.episode_id}: one diagram`);
      assert.ok(sample.prompt_ids.includes(IMAGE_PAD), `${e.episode_id}: image placeholders in the prompt`);
      assert.ok(!sample.response_ids.includes(IMAGE_PAD), `${e.episode_id}: none in the response`);
      const [t1, t2] = sample.turns;
      if (t1?.tool_score === 0 && t1.tool_answer && t2?.tool_answer && t2.tool_answer !== t1.tool_answer)
        wrongThenDifferent += 1;
      if (t1?.tool_score === 0 && t2?.tool_score === 1) recovered += 1;
    }
  assert.ok(
    wrongThenDifferent >= 1,
    'at least one episode answers wrong through the tool, then something else in turn 2',
  );
  // A right second answer after a wrong first is rare once the habit is gone (docs/tasks.md,
  // "Recovery pays only after the habit"), and rarer with the stratified order, whose first answers are
  // right sooner: each of the ten stratified bench draws had one or more, this run's episodes (its id
  // seeds them) none. Measured over draws by bench/warmstart-learning.ts, not asserted in one run.
  console.log(`demo learning: ${recovered} episode(s) right the second time after a wrong first answer`);
  await checkExactlyOnce(fx.client, cfg, runId, result);
});
