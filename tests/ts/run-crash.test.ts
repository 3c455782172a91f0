// Crash tests of real training runs (issue 7): SIGKILL the rollout worker, the trainer worker (also
// between full checkpoints), or the Temporal server mid-step; restart it; the run completes with every sample consumed exactly
// once, the configured number of optimizer steps, and no finished episode generated twice.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { startOrContinueRun, runHandle } from '../../lib/run-client.js';
import { waitFor } from '../../lib/process.js';
import { serverStatus, startServer } from '../../lib/server.js';
import { connectClient } from '../../lib/temporal.js';
import type { RunResult } from '../../workflows/training-run-messages.js';
import { activityCalls } from '../../lib/audit.js';
import { stateLayout } from '../../lib/paths.js';
import { activeTrainerPid, readyTrainerStandbys } from '../../workers/trainer-process.js';
import { checkExactlyOnce, runHistories, startRunFixture, waitForProgress, type RunFixture } from './support/run.js';

const recoveries: Record<string, number> = {};
after(() => console.log(`recovery times (s): ${JSON.stringify(recoveries)}`));

/** `then` checks the finished run's state directory (the fixture removes it afterwards). */
async function runWithCrash(name: string, crash: (fx: RunFixture, runId: string) => Promise<void>,
  opts: { sets?: string[]; then?: (runDir: string, fx: RunFixture) => void | Promise<void> } = {}): Promise<void> {
  const fx = await startRunFixture(opts.sets);
  try {
    const runId = `crash-${name}`;
    // The run starts once the stack is whole: its standby trainers ready (imports done, on the lock).
    await waitFor(async () => readyTrainerStandbys(fx.cfg).length >= fx.cfg.run.trainer_standbys, 'the standby trainers to be ready', 600_000, 100);
    await startOrContinueRun(fx.client, fx.cfg, runId);
    await crash(fx, runId);
    const client = await connectClient(fx.cfg);
    const result = (await runHandle(client, runId).result()) as RunResult;
    await checkExactlyOnce(client, fx.cfg, runId, result);
    await opts.then?.(path.join(fx.cfg.state_dir, 'runs', runId), fx);
  } finally {
    await fx.close();
  }
}

test('SIGKILL of the rollout worker mid-step: a new worker finishes the run', { timeout: 900_000 }, async () => {
  await runWithCrash('rollout', async (fx, runId) => {
    await waitForProgress(fx.client, runId, (p) => p.phase === 'rollout' && p.step === 0, 'the episodes of step 0');
    await new Promise((r) => setTimeout(r, 1500)); // episodes mid-turn
    fx.rollout.kill('SIGKILL');
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 1000));
    fx.rollout = fx.startRollout();
    const before = (await waitForProgress(fx.client, runId, () => true, 'progress')).episodes_done;
    await waitForProgress(fx.client, runId, (p) => p.episodes_done > before || p.phase !== 'rollout', 'the new worker to make progress');
    recoveries.rollout_worker = (Date.now() - t0) / 1000;
  });
});

/** Whether a trainer process of the fixture is running an activity of this type (its in-flight ledger). */
function trainerRunning(fx: RunFixture, type: string): boolean {
  const root = stateLayout(fx.cfg.state_dir).inflight('trainer');
  const dirs = existsSync(root) ? readdirSync(root) : [];
  return dirs.some((d) => readdirSync(path.join(root, d)).some((f) => {
    try {
      return JSON.parse(readFileSync(path.join(root, d, f), 'utf8')).activity_type === type;
    } catch {
      return false;
    }
  }));
}

/** The train_step calls of a run, each with the attempt that completed it and why the one before ended. */
async function trainStepCalls(fx: RunFixture, runId: string) {
  return (await runHistories(fx.client, runId)).flatMap((h) => activityCalls(h).filter((c) => c.type === 'train_step'));
}

test('SIGKILL of the active trainer during a train step: its standby takes over, fails the step over at once, and trains it exactly once', { timeout: 900_000 }, async () => {
  let atKill = -1;
  await runWithCrash('trainer', async (fx, runId) => {
    // Kill as soon as the first train step is seen in flight (loading the model and training take seconds).
    atKill = (await waitForProgress(fx.client, runId, (p) => p.phase === 'train', 'a train step', 600_000)).step;
    await waitFor(async () => trainerRunning(fx, 'train_step'), 'the active trainer to run the step', 600_000, 50);
    const standbys = fx.trainers.map((t) => t.pid);
    const killed = await fx.killTrainer();
    const t0 = Date.now();
    const ckpt = path.join(fx.cfg.state_dir, 'runs', runId, 'checkpoints', `step-${String(atKill).padStart(6, '0')}`);
    assert.equal(existsSync(path.join(ckpt, 'meta.json')), false, 'the kill landed before the step was committed');
    let active: number | null = null;
    await waitFor(async () => (active = activeTrainerPid(fx.cfg)) !== null && active !== killed, 'a standby to take over', 120_000, 50);
    assert.ok(standbys.includes(active!), `the standby that was already warm took over (${active}), not the process started in place of the killed one`);
    // Two measures: until the step is committed again, and until the run has moved past it (weight sync, records).
    const committed = waitFor(async () => existsSync(path.join(ckpt, 'meta.json')), 'the step committed after the crash', 600_000, 100)
      .then(() => { recoveries.trainer_worker_commit = (Date.now() - t0) / 1000; });
    await waitForProgress(fx.client, runId, (p) => p.step > atKill, 'the train step to finish after the crash');
    recoveries.trainer_worker = (Date.now() - t0) / 1000;
    await committed;
  }, {
    sets: ['run.trainer_standbys=1'],
    then: async (_runDir, fx) => {
      const redone = (await trainStepCalls(fx, 'crash-trainer'))[atKill]!;
      assert.ok(redone.attempt! >= 2, `step ${atKill} was retried (attempt ${redone.attempt})`);
      assert.equal(redone.retried_after, 'WorkerDied', 'the dead trainer\'s attempt was failed over by its successor, not left to the heartbeat timeout');
    },
  });
});

test('SIGKILL of the trainer between full checkpoints (run.checkpoint_interval): the light steps are replayed, not re-rolled', { timeout: 900_000 }, async () => {
  await runWithCrash('trainer-light', async (fx, runId) => {
    const runDir = path.join(fx.cfg.state_dir, 'runs', runId);
    // Step 0 is light (its record only): the trainer that restarts in step 1 must rebuild step 0 from it.
    const atKill = await waitForProgress(fx.client, runId, (p) => p.phase === 'train' && p.step === 1, 'train step 1', 600_000);
    await fx.killTrainer();
    const t0 = Date.now();
    assert.equal(existsSync(path.join(runDir, 'checkpoints', 'step-000001', 'meta.json')), false, 'the kill landed before step 1 was committed');
    await waitForProgress(fx.client, runId, (p) => p.step > atKill.step, 'train step 1 after the crash');
    recoveries.trainer_worker_light_step = (Date.now() - t0) / 1000;
  }, {
    sets: ['run.steps=3', 'run.checkpoint_interval=5'],
    then: (runDir) => {
      const meta = (step: number) => JSON.parse(readFileSync(path.join(runDir, 'checkpoints', `step-00000${step}`, 'meta.json'), 'utf8'));
      assert.deepEqual([0, 1, 2].map((s) => meta(s).full), [false, false, true], 'light, light, and the last step full');
      assert.equal(existsSync(path.join(runDir, 'checkpoints', 'step-000000', 'model.safetensors')), false);
      assert.equal(meta(1).metrics['train/replayed_steps'], 1, 'step 1 rebuilt step 0 from its record');
      assert.equal(meta(1).metrics['train/replay_mismatches'], 0, 'the replayed weights are the recorded ones');
    },
  });
});

test('SIGKILL of the Temporal server mid-step: the run continues from its history', { timeout: 900_000 }, async () => {
  await runWithCrash('server', async (fx, runId) => {
    await waitForProgress(fx.client, runId, (p) => p.phase === 'rollout' && p.step === 0, 'the episodes of step 0');
    await new Promise((r) => setTimeout(r, 1500));
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
