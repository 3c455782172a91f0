// The long tier's crash tests of real training runs (run-crash.test.ts has the fast tier's): the rollout
// worker and the Temporal server each SIGKILLed in a run of its own, and the trainer killed between full
// checkpoints (run.checkpoint_interval), whose light steps are replayed from their records, not re-rolled
// (tests/python/test_checkpoint_interval.py checks the replay itself in seconds).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { killRolloutWorker, killTemporalServer, recoveries, runWithCrash } from '../../../testing/crash.js';
import { waitForProgress } from '../../../testing/run.js';

after(() => console.log(`recovery times (s): ${JSON.stringify(recoveries)}`));

test('SIGKILL of the rollout worker mid-step: a new worker finishes the run', { timeout: 900_000 }, async () => {
  await runWithCrash('rollout', (fx, runId) => killRolloutWorker(fx, runId, 0));
});

test('SIGKILL of the trainer between full checkpoints (run.checkpoint_interval): the light steps are replayed, not re-rolled', {
  timeout: 900_000,
}, async () => {
  await runWithCrash(
    'trainer-light',
    async (fx, runId) => {
      const runDir = path.join(fx.cfg.state_dir, 'runs', runId);
      // Step 0 is light (its record only): the trainer that restarts in step 1 must rebuild step 0 from it.
      const atKill = await waitForProgress(
        fx.client,
        runId,
        (p) => p.phase === 'train' && p.step === 1,
        'train step 1',
        600_000,
      );
      await fx.killTrainer();
      const t0 = Date.now();
      assert.equal(
        existsSync(path.join(runDir, 'checkpoints', 'step-000001', 'meta.json')),
        false,
        'the kill landed before step 1 was committed',
      );
      await waitForProgress(fx.client, runId, (p) => p.step > atKill.step, 'train step 1 after the crash');
      recoveries.trainer_worker_light_step = (Date.now() - t0) / 1000;
    },
    {
      sets: ['run.steps=3', 'run.checkpoint_interval=5'],
      then: (runDir) => {
        const meta = (step: number) =>
          JSON.parse(readFileSync(path.join(runDir, 'checkpoints', `step-00000${step}`, 'meta.json'), 'utf8'));
        assert.deepEqual(
          [0, 1, 2].map((s) => meta(s).full),
          [false, false, true],
          'light, light, and the last step full',
        );
        assert.equal(existsSync(path.join(runDir, 'checkpoints', 'step-000000', 'model.safetensors')), false);
        assert.equal(meta(1).metrics['train/replayed_steps'], 1, 'step 1 rebuilt step 0 from its record');
        assert.equal(meta(1).metrics['train/replay_mismatches'], 0, 'the replayed weights are the recorded ones');
      },
    },
  );
});

test('SIGKILL of the Temporal server mid-step: the run continues from its history', { timeout: 900_000 }, async () => {
  await runWithCrash('server', (fx, runId) => killTemporalServer(fx, runId, 0, 'rollout'));
});
