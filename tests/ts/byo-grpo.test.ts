// A third-party environment installed unchanged from PyPI — reasoning-gym's basic_arithmetic, through
// verifiers (workers/environments/tempo_rl_reasoning_gym) — in a short GRPO run end to end: the real
// engine (the tiny model), trainer and environment worker; its episodes in `tempo-rl episodes show`.
import assert from 'node:assert/strict';
import { execFileSync, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { after, test } from 'node:test';
import { readStepRecords } from '../../activities/run.js';
import { runHandle, startOrContinueRun } from '../../client/run-client.js';
import { REPO_ROOT } from '../../base/paths.js';
import type { RunResult } from '../../protocol/training-run.js';
import { startRunFixture } from '../../testing/run.js';
import { startEnvironmentWorker, stopChild } from '../../testing/temporal.js';

const fx = await startRunFixture([
  'rollout.environment=verifiers',
  'dataset.synthetic_task=taskset',
  'dataset.synthetic_size=8',
  'python_env.id=tempo_rl_reasoning_gym',
  'python_env.args={"dataset": "basic_arithmetic", "size": 16, "seed": 1}',
  'rollout.max_response_len=24',
]);
let envWorker: ChildProcess | null = null;
after(async () => {
  if (envWorker) await stopChild(envWorker);
  await fx.close();
});

test('reasoning-gym through verifiers: a two-step GRPO run, its episodes in episodes show', {
  timeout: 900_000,
}, async () => {
  envWorker = await startEnvironmentWorker(fx.cfg);
  const runId = 'byo-reasoning-gym';
  await startOrContinueRun(fx.client, fx.cfg, runId);
  const result = (await runHandle(fx.client, runId).result()) as RunResult;
  assert.equal(result.status, 'completed');
  assert.equal(result.steps_done, 2);
  const records = await readStepRecords(path.join(fx.cfg.state_dir, 'runs', runId));
  assert.equal(records.length, 2);
  const episodes = records.flatMap((r) => r.episodes);
  assert.equal(episodes.length, 2 * 2 * 2, 'prompts_per_step × n_samples_per_prompt, each step');
  const cfgFile = path.join(fx.cfg.state_dir, 'workers', 'config.json');
  const shown = JSON.parse(
    execFileSync(
      process.execPath,
      [
        '--import',
        'tsx',
        path.join(REPO_ROOT, 'cli', 'main.ts'),
        '-c',
        cfgFile,
        'episodes',
        'show',
        episodes[0]!.episode_id,
        '--json',
      ],
      {
        cwd: REPO_ROOT,
        encoding: 'utf8',
      },
    ),
  );
  assert.equal(shown.environment, 'verifiers');
  assert.ok(shown.turns.length >= 1, 'the turns the engine generated');
  assert.ok(['COMPLETED', 'TRUNCATED'].includes(shown.status), shown.status);
  assert.ok(shown.invariants.ok, 'token-exact sample: ids, masks and logprobs line up');
});
