// Crash tests of real training runs: SIGKILL the active trainer during a train step (its standby takes
// over), and the rollout worker then the Temporal server in one run; restart what died; the run
// completes with every sample consumed exactly once, the configured number of optimizer steps, and no
// finished episode generated twice. One run a behaviour; long/run-crash.test.ts (the long tier) has each
// kill in a run of its own and a trainer killed between full checkpoints.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { activityCalls } from '../../client/audit.js';
import { waitFor } from '../../supervise/process.js';
import { stateLayout } from '../../stores/layout.js';
import { activeTrainerPid } from '../../supervise/trainer-process.js';
import { killRolloutWorker, killTemporalServer, recoveries, runWithCrash } from '../../testing/crash.js';
import { runHistories, waitForProgress, type RunFixture } from '../../testing/run.js';

after(() => console.log(`recovery times (s): ${JSON.stringify(recoveries)}`));

test('SIGKILL of the rollout worker in step 0 and of the Temporal server in step 1 mid-rollout: the run finishes from its history', {
  timeout: 900_000,
}, async () => {
  await runWithCrash('rollout-server', async (fx, runId) => {
    await killRolloutWorker(fx, runId, 0);
    await killTemporalServer(fx, runId, 1, 'rollout');
  });
});

/** Whether a trainer process of the fixture is running an activity of this type (its in-flight ledger). */
function trainerRunning(fx: RunFixture, type: string): boolean {
  const root = stateLayout(fx.cfg.state_dir).inflight('trainer');
  const dirs = existsSync(root) ? readdirSync(root) : [];
  return dirs.some((d) =>
    readdirSync(path.join(root, d)).some((f) => {
      try {
        return JSON.parse(readFileSync(path.join(root, d, f), 'utf8')).activity_type === type;
      } catch {
        return false;
      }
    }),
  );
}

/** The train_step calls of a run, each with the attempt that completed it and why the one before ended. */
async function trainStepCalls(fx: RunFixture, runId: string) {
  return (await runHistories(fx.client, runId)).flatMap((h) => activityCalls(h).filter((c) => c.type === 'train_step'));
}

test('SIGKILL of the active trainer during a train step: its standby takes over, fails the step over at once, and trains it exactly once', {
  timeout: 900_000,
}, async () => {
  let atKill = -1;
  await runWithCrash(
    'trainer',
    async (fx, runId) => {
      // Kill as soon as the first train step is seen in flight (loading the model and training take seconds).
      atKill = (await waitForProgress(fx.client, runId, (p) => p.phase === 'train', 'a train step', 600_000)).step;
      await waitFor(async () => trainerRunning(fx, 'train_step'), 'the active trainer to run the step', 600_000, 50);
      const standbys = fx.trainers.map((t) => t.pid);
      const killed = await fx.killTrainer();
      const t0 = Date.now();
      const ckpt = path.join(fx.cfg.state_dir, 'runs', runId, 'checkpoints', `step-${String(atKill).padStart(6, '0')}`);
      assert.equal(existsSync(path.join(ckpt, 'meta.json')), false, 'the kill landed before the step was committed');
      let active: number | null = null;
      await waitFor(
        async () => (active = activeTrainerPid(fx.cfg)) !== null && active !== killed,
        'a standby to take over',
        120_000,
        50,
      );
      assert.ok(
        standbys.includes(active!),
        `the standby that was already warm took over (${active}), not the process started in place of the killed one`,
      );
      // Two measures: until the step is committed again, and until the run has moved past it (weight sync, records).
      const committed = waitFor(
        async () => existsSync(path.join(ckpt, 'meta.json')),
        'the step committed after the crash',
        600_000,
        100,
      ).then(() => {
        recoveries.trainer_worker_commit = (Date.now() - t0) / 1000;
      });
      await waitForProgress(fx.client, runId, (p) => p.step > atKill, 'the train step to finish after the crash');
      recoveries.trainer_worker = (Date.now() - t0) / 1000;
      await committed;
    },
    {
      sets: ['run.trainer_standbys=1'],
      then: async (_runDir, fx) => {
        const redone = (await trainStepCalls(fx, 'crash-trainer'))[atKill]!;
        assert.ok(redone.attempt! >= 2, `step ${atKill} was retried (attempt ${redone.attempt})`);
        assert.equal(
          redone.retried_after,
          'WorkerDied',
          "the dead trainer's attempt was failed over by its successor, not left to the heartbeat timeout",
        );
      },
    },
  );
});
