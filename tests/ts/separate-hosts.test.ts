// Hosts apart: a GRPO run whose rollout worker and engine, and whose trainer, have separate
// state directories and share only the Temporal server and an S3 store (S3Proxy, testing/s3-server.ts).
// Samples go through S3; each step's checkpoint is committed in S3 (COMMIT.json written last); the
// engine pulls every new version's weights from S3 itself (workers/tempo_engine/weights_from_store.py). Mid-run the
// trainer is SIGKILLed during a train step and a trainer on a third "host" (an empty state directory)
// takes over from what S3 holds. Skips, naming why, where S3Proxy or the tiny model is missing. In the
// long tier (tests/long.txt): the fast tier has the trainer SIGKILL (run-crash) and S3 (blobstore-s3-wire).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { openBlobStore } from '../../stores/blobstore.js';
import { closeBlobStore } from '../../lib/blob-store-config.js';
import { tinyModelDir } from '../../base/paths.js';
import { stateLayout } from '../../stores/layout.js';
import { isAlive } from '../../supervise/process.js';
import { runHandle, startOrContinueRun } from '../../client/run-client.js';
import { S3ServerUnavailable, startS3Server, type S3Server } from '../../testing/s3-server.js';
import { parseCheckpointLocation, readCommitRecord } from '../../stores/checkpoint.js';
import { exportModel } from '../../client/warm-start.js';
import type { RunResult } from '../../protocol/training-run.js';
import { engineWeightVersion, testEngines } from '../../testing/engines.js';
import { startRunFixture, waitForProgress } from '../../testing/run.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'separate-hosts-'));
const BUCKET = 'tempo-hosts';
const URI = `s3://${BUCKET}/cluster`;

let server: S3Server | null = null;
let skip: string | false = false;
if (!existsSync(path.join(tinyModelDir(), '.complete')))
  skip = `the tiny model is missing at ${tinyModelDir()} (source scripts/bootstrap.sh)`;
else {
  try {
    server = await startS3Server({ dataDir: path.join(tmp, 's3data'), buckets: [BUCKET] });
    // Every process this file starts (engine, rollout worker, trainers) reaches the store this way only.
    Object.assign(process.env, server.awsEnv(), { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' });
  } catch (err) {
    if (!(err instanceof S3ServerUnavailable)) throw err;
    skip = `S3 server unavailable: ${err.message}`;
  }
}

after(async () => {
  if (server) {
    const pid = server.pid;
    await server.stop();
    assert.equal(isAlive(pid), false, 'S3Proxy still running after stop()');
  }
  rmSync(tmp, { recursive: true, force: true });
});

test('rollout host and trainer host share only Temporal and S3; the trainer dies mid-step and a third host finishes the run', {
  skip,
  timeout: 1_500_000,
}, async () => {
  const engineState = path.join(tmp, 'engine-host');
  const engines = await testEngines(1, { sets: [`blobs.uri=${URI}`, `state_dir=${engineState}`] });
  const trainerHosts: string[] = [];
  const fx = await startRunFixture([`blobs.uri=${URI}`, 'run.steps=3'], engines, {
    trainerStateDir: () => {
      trainerHosts.push(path.join(tmp, `trainer-host-${trainerHosts.length + 1}`));
      return trainerHosts.at(-1)!;
    },
  });
  const store = await openBlobStore(URI);
  try {
    const runId = 'hosts-apart';
    await startOrContinueRun(fx.client, fx.cfg, runId);
    // The worst moment: step 1 is training on host 1, which holds step 0 only on its own disk and in S3.
    await waitForProgress(fx.client, runId, (p) => p.phase === 'train' && p.step === 1, 'step 1 to train', 900_000);
    await new Promise((r) => setTimeout(r, 1000));
    fx.trainers[0]!.kill('SIGKILL');
    fx.trainers[0] = fx.startTrainer();
    const result = (await runHandle(fx.client, runId).result()) as RunResult;
    assert.equal(result.status, 'completed');
    assert.equal(result.steps_done, 3);

    // Every step is committed once in S3; each sample consumed by exactly one step, updates applied once.
    const consumed = new Map<string, number>();
    let updates = 0;
    for (let step = 0; step < 3; step++) {
      const key = `runs/${runId}/checkpoints/step-${String(step).padStart(6, '0')}`;
      const record = await readCommitRecord(store, key);
      for (const ref of record.sample_refs as string[]) consumed.set(ref, (consumed.get(ref) ?? 0) + 1);
      updates += (record.metrics as Record<string, number>)['train/updates'] ?? 0;
      assert.equal(record.optimizer_steps, updates, `optimizer steps at step ${step}`);
      assert.ok(record.files['model.safetensors']! > 0);
    }
    assert.equal(consumed.size, fx.cfg.rollout.prompts_per_step * fx.cfg.rollout.n_samples_per_prompt * 3);
    assert.ok(
      [...consumed.values()].every((n) => n === 1),
      'every sample consumed by exactly one train step',
    );
    assert.equal(result.checkpoint, `${URI}/named/runs/${runId}/checkpoints/step-000002`);

    // Nothing of the trainer's on the rollout host; the second trainer host pulled what it resumed from.
    assert.equal(existsSync(path.join(fx.cfg.state_dir, 'runs', runId, 'checkpoints')), false);
    assert.equal(trainerHosts.length, 2);
    const scratch = (host: string) => path.join(stateLayout(host).trainerScratch, 'runs', runId, 'checkpoints');
    assert.ok(readdirSync(scratch(trainerHosts[1]!)).includes('step-000000'), 'host 2 pulled step 0 from S3');
    assert.ok(readdirSync(scratch(trainerHosts[1]!)).includes('step-000002'));
    assert.equal(existsSync(path.join(fx.cfg.state_dir, 'blobs')), false, 'the rollout host kept no local store');

    // The engine serves the last version, pulled from S3 into its own host's cache.
    assert.equal(await engineWeightVersion(engines.urls[0]!), '3');
    const pulled = readdirSync(stateLayout(engineState).engineWeights).filter((d) => !d.startsWith('.'));
    assert.ok(
      pulled.some((d) => d.includes('step-000002')),
      `the engine pulled step 2: ${pulled}`,
    );

    // What a user exports (the warm start's path) comes from the store too.
    const out = path.join(tmp, 'exported');
    await exportModel(result.checkpoint!, out);
    assert.ok(readdirSync(out).includes('model.safetensors') && !readdirSync(out).includes('optimizer.pt'));
    assert.ok(parseCheckpointLocation(result.checkpoint!));
  } finally {
    closeBlobStore(store);
    await fx.close();
    await engines.stop();
  }
});
