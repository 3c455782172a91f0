// An S3 blob store (blobs.uri=s3://…) end to end against a real S3 server (S3Proxy, testing/s3-server.ts):
// the rollout worker's storeSample writes an episode's sample to S3 from one state directory, and the
// Python trainer — another process with another state directory — loads it from S3, trains a step
// on the tiny model and commits its checkpoint in S3 (workers/trainer/stores/checkpoints.py). Skips, naming why, where S3Proxy
// cannot be installed or run, or the tiny model is missing (scripts/bootstrap.sh builds it).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { createActivities } from '../../activities/index.js';
import type { StoreSampleInput } from '../../protocol/activities.js';
import { closeBlobStore, openConfiguredBlobStore } from '../../lib/blob-store-config.js';
import type { ConditionalBlobStore } from '../../stores/blobstore.js';
import type { PromptRow } from '../../lib/data/rows.js';
import { sftRecord } from '../../lib/data/sft.js';
import { pythonBin, REPO_ROOT, tinyModelDir } from '../../base/paths.js';
import { isAlive } from '../../supervise/process.js';
import { initialRunState } from '../../config/run-plan.js';
import { parseCheckpointLocation, readCommitRecord } from '../../stores/checkpoint.js';
import { S3ServerUnavailable, startS3Server, type S3Server } from '../../testing/s3-server.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'blobstore-s3-wire-'));
const BUCKET = 'tempo-wire';
const URI = `s3://${BUCKET}/stack`;
const EOS = 151645; // <|im_end|> of the tiny model's Qwen3 tokenizer

let server: S3Server | null = null;
let skip: string | false = false;
if (!existsSync(path.join(tinyModelDir(), '.complete')))
  skip = `the tiny model is missing at ${tinyModelDir()} (source scripts/bootstrap.sh)`;
else {
  try {
    server = await startS3Server({ dataDir: path.join(tmp, 's3data'), buckets: [BUCKET] });
  } catch (err) {
    if (!(err instanceof S3ServerUnavailable)) throw err;
    skip = `S3 server unavailable: ${err.message}`;
  }
}

const opened: ConditionalBlobStore[] = [];
after(async () => {
  for (const s of opened) closeBlobStore(s);
  if (server) {
    const pid = server.pid;
    await server.stop();
    assert.equal(isAlive(pid), false, 'S3Proxy still running after stop()');
  }
  rmSync(tmp, { recursive: true, force: true });
});

const TRAIN = `
import json, sys
from temporalio.testing import ActivityEnvironment
from trainer.worker.activities import TrainerActivities
from trainer.step.train_step import Trainer
doc = json.load(sys.stdin)
out = ActivityEnvironment().run(TrainerActivities(Trainer(), doc["own"], doc["scratch"]).train_step, doc["payload"])
print(json.dumps(out))
`;

function sampleInput(i: number, prompt_ref: string, trajectory_ref: string, reward: number): StoreSampleInput {
  return {
    episode_id: `r1/0/0/${i}`,
    run_id: 'r1',
    step: 0,
    prompt_index: 0,
    sample_index: i,
    prompt_ref,
    trajectory_ref,
    limits: { max_response_len: 16, max_context_len: 64 },
    environment: 'geo3k',
    turns: [{ engine: 'e', weight_version: 0, finish_reason: 'stop' }],
    images: [],
    reward,
    status: 'COMPLETED',
    truncated_reason: null,
    temperature: 1,
    label: '4',
  };
}

test('blobs.uri is checked when the config loads, naming the key and the value', { skip: false }, () => {
  assert.throws(
    () => loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'blobs.uri=gs://bucket/x'] }),
    (err: Error) => {
      assert.match(err.message, /blobs\.uri/);
      assert.match(err.message, /gs:\/\/bucket\/x/);
      assert.match(err.message, /unsupported scheme/);
      return true;
    },
  );
  assert.equal(loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'blobs.uri=s3://b-1/p/'] }).blobs.uri, 's3://b-1/p');
  assert.equal(
    initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/x'] }), 'r').plan.blob_store,
    'file:///tmp/x/blobs',
  );
});

test('a sample the rollout side stores in S3 is trained on by the Python trainer of another state directory', {
  skip,
  timeout: 600_000,
}, async () => {
  const env = { ...process.env, ...server!.awsEnv(), AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' };
  const rolloutCfg = loadConfig({
    env: {},
    sets: [`state_dir=${path.join(tmp, 'rollout-state')}`, `blobs.uri=${URI}`],
  });
  const trainerCfg = loadConfig({
    env: {},
    sets: [`state_dir=${path.join(tmp, 'trainer-state')}`, `blobs.uri=${URI}`],
  });
  const store = await openConfiguredBlobStore(rolloutCfg, env);
  opened.push(store);
  assert.equal(store.uri, URI);
  const acts = createActivities({ cfg: rolloutCfg, store });

  // What the render and generate steps would have stored, then the store step itself.
  const prompt_ref = await store.putBytes(
    Buffer.from(
      JSON.stringify({
        prompt_ids: [151644, 872, 198, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198],
        features: null,
      }),
    ),
    'json',
  );
  const refs = [];
  for (const [i, reward] of [1, 0].entries()) {
    const trajectory = {
      prompt_len: 12,
      budget: 16,
      response_ids: [19 + i, 13, EOS],
      loss_mask: [1, 1, 1],
      logprobs: [-1.5, -0.7, -0.2],
      spans: [{ gen_start: 0, gen_len: 3, synthetic_eos_at: null, obs_start: null, obs_len: 0 }],
    };
    const trajectory_ref = await store.putJson(`trajectories/r1/0/0/${i}.json`, { trajectory, routed_experts: [null] });
    const { sample_ref } = await acts.storeSample({
      ...sampleInput(i, prompt_ref, trajectory_ref, reward),
      blob_store: URI,
    });
    refs.push({ ref: sample_ref, reward, group_id: 'r1/0/0' });
  }
  assert.equal(
    existsSync(path.join(tmp, 'rollout-state', 'blobs')),
    false,
    "nothing went to the rollout side's local store",
  );

  const plan = initialRunState(trainerCfg, 'r1').plan;
  assert.equal(plan.blob_store, URI);
  const payload = {
    run_id: 'r1',
    step: 0,
    run_dir: plan.run_dir,
    blob_store: plan.blob_store,
    model_path: tinyModelDir(),
    samples: refs,
    hyper: { ...plan.hyper, lr: 1e-3 },
    data_cursor: { epoch: 0, cursor: 1 },
  };
  const res = spawnSync(pythonBin(), ['-c', TRAIN], {
    input: JSON.stringify({ own: URI, scratch: path.join(tmp, 'trainer-state', 'trainer-scratch'), payload }),
    encoding: 'utf8',
    cwd: path.join(tmp),
    timeout: 540_000,
    env: { ...env, PYTHONPATH: path.join(REPO_ROOT, 'workers') },
  });
  assert.equal(res.status, 0, res.stderr.slice(-4000));
  const out = JSON.parse(res.stdout.trim().split('\n').pop()!) as {
    step: number;
    weight_version: number;
    checkpoint: string;
    metrics: Record<string, number>;
  };
  assert.equal(out.weight_version, 1);
  assert.equal(out.metrics['train/n_samples'], 2, JSON.stringify(out.metrics));
  // Committed in the store (its location names it), cached in the trainer's scratch, not in the plan's run_dir.
  assert.equal(out.checkpoint, `${URI}/named/runs/r1/checkpoints/step-000000`);
  const record = await readCommitRecord(store, parseCheckpointLocation(out.checkpoint)!.key);
  assert.ok(
    record.files['model.safetensors']! > 0 &&
      (await store.exists(store.namedRef(`${record.prefix}/model.safetensors`))),
  );
  assert.ok(
    readdirSync(
      path.join(tmp, 'trainer-state', 'trainer-scratch', 'runs', 'r1', 'checkpoints', 'step-000000'),
    ).includes('meta.json'),
  );
  assert.equal(existsSync(plan.run_dir), false, 'nothing written to the run_dir the plan names');
  assert.equal(existsSync(path.join(tmp, 'trainer-state', 'blobs')), false, 'the trainer read no local store');
});

test('an SFT export, which hands images on as file paths, refuses an S3 store naming blobs.uri', { skip }, async () => {
  const store = await openConfiguredBlobStore(loadConfig({ env: {}, sets: [`state_dir=${tmp}`, `blobs.uri=${URI}`] }), {
    ...process.env,
    ...server!.awsEnv(),
  });
  opened.push(store);
  const row: PromptRow = { id: 'x', problem: 'What is <image>?', answer: '1', images: ['blob:cas/ab/ab.png'] };
  assert.throws(() => sftRecord(row, store), new RegExp(`blobs\\.uri=${URI}`));
  assert.equal(
    sftRecord({ ...row, problem: 'What is 2+2?', images: [] }, store).images.length,
    0,
    'text-only rows export',
  );
});
