// A real training run driven through its updates: pause at once (in-flight episodes cancelled and
// redone), resume, pause after the step, stop, then `train --run-id` again continues where it
// stopped; search attributes follow the status; every sample is consumed exactly once.
// Then, on the same stack (its server, rollout worker and trainer), a third-party environment installed
// unchanged from PyPI — reasoning-gym's basic_arithmetic through verifiers
// (workers/environments/tempo_rl_reasoning_gym) on the Python environment worker — in a short GRPO run
// end to end, its episodes in `tempo-rl episodes show`.
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync } from 'node:child_process';
import path from 'node:path';
import { after, test } from 'node:test';
import { readStepRecords } from '../../activities/run.js';
import { REPO_ROOT } from '../../base/paths.js';
import { controlRun, runHandle, startOrContinueRun } from '../../client/run-client.js';
import { withSets } from '../../config/load.js';
import type { RunResult } from '../../protocol/training-run.js';
import { waitFor } from '../../supervise/process.js';
import { checkExactlyOnce, startRunFixture, waitForProgress } from '../../testing/run.js';
import { startEnvironmentWorker, stopChild } from '../../testing/temporal.js';

const fx = await startRunFixture(['run.steps=3']);
let envWorker: ChildProcess | null = null;
after(async () => {
  if (envWorker) await stopChild(envWorker);
  await fx.close();
});

test('pause now, resume, pause after the step, stop, continue: exactly once', { timeout: 1_200_000 }, async () => {
  const runId = 'control';
  const { client, cfg } = fx;
  await startOrContinueRun(client, cfg, runId);

  const at = await waitForProgress(
    client,
    runId,
    (p) => p.phase === 'rollout' && p.step === 0,
    'the episodes of step 0',
  );
  const pausedNow = await controlRun(client, runId, 'pause-now');
  assert.equal(pausedNow.accepted, true);
  const p1 = await waitForProgress(client, runId, (p) => p.status === 'paused', 'paused');
  // The episodes may all finish between the query and the update: then the pause lands after the step.
  const cancelled = /cancelled/.test(pausedNow.message);
  assert.equal(p1.step, cancelled ? at.step : at.step + 1, `paused where the ack said: ${pausedNow.message}`);
  // Visibility is eventually consistent: the upserted attribute shows in a list a moment after the query.
  const listedAsPaused = async () => {
    for await (const wf of client.workflow.list({ query: `TempoRlStatus = 'paused'` }))
      if (wf.workflowId === `run/${runId}`) return true;
    return false;
  };
  await waitFor(listedAsPaused, 'search attribute TempoRlStatus=paused', 10_000);
  assert.equal((await controlRun(client, runId, 'pause')).accepted, true, 'pausing a paused run is acknowledged');

  assert.equal((await controlRun(client, runId, 'resume')).accepted, true);
  assert.equal((await controlRun(client, runId, 'resume')).accepted, false, 'resuming a running run is refused');
  const inStep = await waitForProgress(
    client,
    runId,
    (p) => p.step > p1.step - 1 && p.step >= 1 && p.phase === 'rollout',
    'the next step',
  );
  assert.equal((await controlRun(client, runId, 'pause')).accepted, true);
  const p2 = await waitForProgress(client, runId, (p) => p.status === 'paused', 'paused after step 1');
  assert.equal(p2.step, inStep.step + 1, 'pause after the step lets the step finish');

  assert.equal((await controlRun(client, runId, 'stop')).accepted, true);
  const stopped = (await runHandle(client, runId).result()) as RunResult;
  assert.equal(stopped.status, 'stopped');
  assert.equal(stopped.steps_done, p2.step);

  const again = await startOrContinueRun(client, cfg, runId);
  assert.equal(again.resumedFromStep, p2.step);
  const done = (await runHandle(client, runId).result()) as RunResult;
  await checkExactlyOnce(client, cfg, runId, done);
});

test('reasoning-gym through verifiers: a two-step GRPO run, its episodes in episodes show', {
  timeout: 900_000,
}, async () => {
  envWorker = await startEnvironmentWorker(fx.cfg);
  const cfg = withSets(fx.cfg, [
    'run.steps=2',
    'rollout.environment=verifiers',
    'dataset.synthetic_task=taskset',
    'dataset.synthetic_size=8',
    'python_env.id=tempo_rl_reasoning_gym',
    'python_env.args={"dataset": "basic_arithmetic", "size": 16, "seed": 1}',
    'rollout.max_response_len=24',
  ]);
  const runId = 'byo-reasoning-gym';
  await startOrContinueRun(fx.client, cfg, runId);
  const result = (await runHandle(fx.client, runId).result()) as RunResult;
  assert.equal(result.status, 'completed');
  assert.equal(result.steps_done, 2);
  const records = await readStepRecords(path.join(cfg.state_dir, 'runs', runId));
  assert.equal(records.length, 2);
  const episodes = records.flatMap((r) => r.episodes);
  assert.equal(episodes.length, 2 * 2 * 2, 'prompts_per_step × n_samples_per_prompt, each step');
  const cfgFile = path.join(cfg.state_dir, 'workers', 'config.json');
  const cli = [path.join(REPO_ROOT, 'cli', 'main.ts'), '-c', cfgFile, 'episodes', 'show'];
  const show = (id: string) =>
    JSON.parse(
      execFileSync(process.execPath, ['--import', 'tsx', ...cli, id, '--json'], { cwd: REPO_ROOT, encoding: 'utf8' }),
    );
  const shown = show(episodes[0]!.episode_id);
  assert.equal(shown.environment, 'verifiers');
  assert.ok(shown.turns.length >= 1, 'the turns the engine generated');
  assert.ok(['COMPLETED', 'TRUNCATED'].includes(shown.status), shown.status);
  assert.ok(shown.invariants.ok, 'token-exact sample: ids, masks and logprobs line up');
});
