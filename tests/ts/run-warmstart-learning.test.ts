// The demo's claim, tested as a user would see it (issue: a policy that learns): the tiny model
// warm-started by SFT on tool transcripts (through the durable run machinery; cached) writes real
// calc_score calls on the live vLLM engine, and a short multi-turn GRPO run on the angle-facts task
// raises its reward and its held-out eval reward, with the default math RM and no token restriction.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import YAML from 'yaml';
import { LocalBlobStore } from '../../lib/blobstore.js';
import { Sample } from '../../lib/contract.js';
import { REPO_ROOT, stateLayout } from '../../lib/paths.js';
import { runHandle, startOrContinueRun } from '../../lib/run-client.js';
import { checkInvariants } from '../../lib/trajectory.js';
import { ensureWarmStart, waitForRun } from '../../lib/warm-start.js';
import { readStepRecords } from '../../activities/run.js';
import type { EpisodeSummary } from '../../workflows/episode-messages.js';
import type { RunResult } from '../../workflows/training-run-messages.js';
import { checkExactlyOnce, startRunFixture } from './support/run.js';

const demo = YAML.parse(readFileSync(path.join(REPO_ROOT, 'configs', 'cpu-tiny.yaml'), 'utf8')) as Record<string, Record<string, unknown>>;
const sections = ['dataset', 'rollout', 'grpo', 'run'].map((k) => `${k}=${JSON.stringify(demo[k])}`);
const fx = await startRunFixture([...sections, `engines.max_model_len=${demo.engines!.max_model_len}`]);
after(() => fx.close());

const IMAGE_PAD = 151655;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);

test('warm start by SFT, then GRPO raises the reward of the angle-facts task through real tool calls', { timeout: 1_800_000 }, async () => {
  const warm = await ensureWarmStart(fx.client, fx.cfg, (id) => waitForRun(fx.client, id));
  console.log(`warm start: ${warm.model_dir} (${warm.built ? `built in ${warm.seconds.toFixed(0)} s` : 'cached'})`);
  if (warm.built) {
    // The SFT run went through the same durable steps: one checkpoint per step, each record sample consumed once.
    const sft = (await runHandle(fx.client, warm.run_id).result()) as RunResult;
    assert.equal(sft.status, 'completed');
    const rows = await readStepRecords(path.join(fx.cfg.state_dir, 'runs', warm.run_id));
    const nll = rows.map((r) => r.metrics['sft/nll']!);
    assert.ok(nll[nll.length - 1]! < nll[0]! / 10, `SFT loss falls: ${nll[0]} → ${nll[nll.length - 1]}`);
  }

  const cfg = { ...fx.cfg, model: { ...fx.cfg.model, path: warm.model_dir } };
  const runId = 'warm-grpo';
  await startOrContinueRun(fx.client, cfg, runId);
  const result = (await runHandle(fx.client, runId).result()) as RunResult;
  await checkExactlyOnce(fx.client, cfg, runId, result);
  const rows = (await readStepRecords(path.join(cfg.state_dir, 'runs', runId))).map((r) => r.metrics);
  const curve = rows.map((r) => r['rollout/raw_reward']!);
  const start = rows[0]!;
  const end = rows[rows.length - 1]!;
  console.log(`reward per step: ${curve.map((r) => r.toFixed(3)).join(' ')}`);
  console.log(`eval reward ${start['eval_start/reward']} → ${end['eval/reward']}; first-turn tool calls ${start['eval_start/first_turn_tool_call_rate']}; recovery ${mean(rows.map((r) => r['rollout/recovery_rate']!))}`);

  assert.ok(start['eval_start/first_turn_tool_call_rate']! >= 0.8, `the warm-started policy calls calc_score in ≥ 80% of first turns: ${start['eval_start/first_turn_tool_call_rate']}`);
  const firstTwo = (curve[0]! + curve[1]!) / 2;
  const lastTwo = (curve[curve.length - 1]! + curve[curve.length - 2]!) / 2;
  assert.ok(lastTwo >= firstTwo + 0.25, `reward rises by ≥ 0.25: first two ${firstTwo.toFixed(3)}, last two ${lastTwo.toFixed(3)}`);
  assert.ok(end['eval/reward']! >= start['eval_start/reward']! + 0.15, `held-out eval reward rises by ≥ 0.15: ${start['eval_start/reward']} → ${end['eval/reward']}`);

  // At least one episode answered wrong, then something else in turn 2; every sample keeps the token invariants.
  const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
  const summaries: EpisodeSummary[] = [];
  for await (const wf of fx.client.workflow.list({ query: `WorkflowType = 'episode' AND ExecutionStatus = 'Completed'` }))
    if (wf.workflowId.startsWith(`episode/${runId}/`)) summaries.push((await fx.client.workflow.getHandle(wf.workflowId).result()) as EpisodeSummary);
  const changed = summaries.filter((e) => e.first_answer === 'wrong' && e.tool_answers?.[1] != null && e.tool_answers[1] !== e.tool_answers[0]);
  assert.ok(changed.length > 0, 'an episode with a wrong tool answer followed by a different answer in turn 2');
  for (const e of summaries.filter((x) => x.sample_ref)) {
    const s = Sample.parse(await store.getJson(e.sample_ref));
    const inv = checkInvariants(s, cfg.rollout.max_response_len);
    assert.ok(inv.ok, `${e.episode_id}: ${inv.problems.join('; ')}`);
    assert.equal(s.response_ids.filter((id) => id === IMAGE_PAD).length, 0, `${e.episode_id}: no image placeholder on the response side`);
    assert.equal(s.prompt_ids.filter((id) => id === IMAGE_PAD).length > 0, s.images.length > 0, `${e.episode_id}: image placeholders iff images`);
    assert.equal(s.turns.reduce((a, t) => a + t.generated_tokens, 0), s.loss_mask.reduce<number>((a, b) => a + b, 0), `${e.episode_id}: mask 1 = generated tokens`);
  }
});
