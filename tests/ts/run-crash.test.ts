// Crash tests of real training runs (issue 7): SIGKILL the rollout worker, the trainer worker, or
// the Temporal server mid-step; restart it; the run completes with every sample consumed exactly
// once, the configured number of optimizer steps, and no finished episode generated twice.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import type { Client } from '@temporalio/client';
import type { TempoConfig } from '../../config/schema.js';
import { readStepRecords } from '../../activities/run.js';
import { startOrContinueRun, runHandle } from '../../lib/run-client.js';
import { serverStatus, startServer } from '../../lib/server.js';
import { connectClient } from '../../lib/temporal.js';
import type { RunResult } from '../../workflows/training-run-messages.js';
import { startRunFixture, waitForProgress, type RunFixture } from './support/run.js';

const recoveries: Record<string, number> = {};
after(() => console.log(`recovery times (s): ${JSON.stringify(recoveries)}`));

async function checkExactlyOnce(client: Client, cfg: TempoConfig, runId: string, result: RunResult): Promise<void> {
  assert.equal(result.status, 'completed');
  const steps = cfg.run.steps;
  assert.equal(result.steps_done, steps);
  const runDir = path.join(cfg.state_dir, 'runs', runId);
  // The trainer's own record: one committed checkpoint per step, each listing the samples it consumed.
  const ckpts = readdirSync(path.join(runDir, 'checkpoints')).filter((n) => /^step-\d+$/.test(n)).sort();
  assert.equal(ckpts.length, steps, `one checkpoint per step: ${ckpts}`);
  const consumed = new Map<string, number>();
  for (const c of ckpts) {
    const meta = JSON.parse(readFileSync(path.join(runDir, 'checkpoints', c, 'meta.json'), 'utf8'));
    for (const ref of meta.sample_refs as string[]) consumed.set(ref, (consumed.get(ref) ?? 0) + 1);
    assert.equal(meta.optimizer_steps, meta.step + 1, `optimizer steps at ${c}`);
  }
  const records = await readStepRecords(runDir);
  assert.deepEqual(records.map((r) => r.step), Array.from({ length: steps }, (_, i) => i));
  const expected = cfg.rollout.prompts_per_step * cfg.rollout.n_samples_per_prompt;
  for (const r of records) assert.equal(r.episodes.length, expected, `episodes of step ${r.step}`);
  for (const ref of consumed.keys()) assert.match(ref, new RegExp(`samples/${runId}/`));
  assert.ok([...consumed.values()].every((n) => n === 1), 'every sample consumed by exactly one train step');
  const trained = records.flatMap((r) => r.episodes.filter((e) => e.trained).map((e) => e.episode_id));
  assert.equal(new Set(trained).size, trained.length);
  assert.equal(consumed.size, trained.length);
  // No finished episode ran twice: each episode workflow id has exactly one completed execution.
  const completed = new Map<string, number>();
  for await (const wf of client.workflow.list({ query: `WorkflowType = 'episode' AND ExecutionStatus = 'Completed'` })) {
    if (wf.workflowId.startsWith(`episode/${runId}/`)) completed.set(wf.workflowId, (completed.get(wf.workflowId) ?? 0) + 1);
  }
  assert.equal(completed.size, steps * expected);
  assert.ok([...completed.values()].every((n) => n === 1), 'no episode completed twice');
}

async function runWithCrash(name: string, crash: (fx: RunFixture, runId: string) => Promise<void>): Promise<void> {
  const fx = await startRunFixture();
  try {
    const runId = `crash-${name}`;
    await startOrContinueRun(fx.client, fx.cfg, runId);
    await crash(fx, runId);
    const client = await connectClient(fx.cfg);
    const result = (await runHandle(client, runId).result()) as RunResult;
    await checkExactlyOnce(client, fx.cfg, runId, result);
  } finally {
    await fx.close();
  }
}

test('SIGKILL of the rollout worker mid-step: a new worker finishes the run', { timeout: 900_000 }, async () => {
  await runWithCrash('rollout', async (fx, runId) => {
    await waitForProgress(fx.client, runId, (p) => p.phase === 'rollout' && p.episodes_done >= 1, 'an episode to finish');
    fx.rollout.kill('SIGKILL');
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 1000));
    fx.rollout = fx.startRollout();
    const before = (await waitForProgress(fx.client, runId, () => true, 'progress')).episodes_done;
    await waitForProgress(fx.client, runId, (p) => p.episodes_done > before || p.phase !== 'rollout', 'the new worker to make progress');
    recoveries.rollout_worker = (Date.now() - t0) / 1000;
  });
});

test('SIGKILL of the trainer worker during a train step: the step is trained exactly once', { timeout: 900_000 }, async () => {
  await runWithCrash('trainer', async (fx, runId) => {
    await waitForProgress(fx.client, runId, (p) => p.phase === 'train', 'a train step');
    await new Promise((r) => setTimeout(r, 1500));
    fx.trainer.kill('SIGKILL');
    const t0 = Date.now();
    fx.trainer = fx.startTrainer();
    await waitForProgress(fx.client, runId, (p) => p.phase !== 'train' || p.step >= 1, 'the train step to finish after the crash');
    recoveries.trainer_worker = (Date.now() - t0) / 1000;
  });
});

test('SIGKILL of the Temporal server mid-step: the run continues from its history', { timeout: 900_000 }, async () => {
  await runWithCrash('server', async (fx, runId) => {
    await waitForProgress(fx.client, runId, (p) => p.phase === 'rollout' && p.episodes_done >= 1, 'an episode to finish');
    const { pid } = await serverStatus(fx.cfg);
    assert.ok(pid);
    process.kill(pid!, 'SIGKILL');
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 1000));
    await startServer(fx.cfg);
    const client = await connectClient(fx.cfg);
    const before = (await waitForProgress(client, runId, () => true, 'the server to answer')).episodes_done;
    await waitForProgress(client, runId, (p) => p.episodes_done > before || p.phase !== 'rollout', 'progress after the restart');
    recoveries.temporal_server = (Date.now() - t0) / 1000;
  });
});
