// An empty step — every episode failed — is not trained and does not move the data cursor: the run
// redoes it under new episode ids (run.empty_step_retries), then ends 'failed' with the reason, and a
// continued run picks the same prompts up. The real trainingRun and episode workflows on a real dev
// server; the engine is the scripted double (its -9999 placeholder logprob fails an episode at
// once), the trainer a recording stand-in on the trainer task queue.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { type NativeConnection, Worker } from '@temporalio/worker';
import { readStepRecords } from '../../activities/run.js';
import { runDir } from '../../stores/layout.js';
import type { TrainStepInput } from '../../lib/contract.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { stateLayout } from '../../stores/layout.js';
import { runHandle, startOrContinueRun } from '../../client/run-client.js';
import { connectClient, connectWorker } from '../../supervise/temporal.js';
import type { RunResult } from '../../protocol/training-run.js';
import { EngineDouble, toolCall } from '../../testing/episode-engine-double.js';
import { startRolloutWorker, startTestServer, type RunningWorker, type TestServer } from '../../testing/temporal.js';

let failing = true;
// Every synthetic diagram has the same size: 2 image tokens under the processor settings below.
const engine = new EngineDouble(
  () => (failing ? { text: 'ab', logprobs: [-0.5, -9999, -0.1] } : { text: toolCall('60') }),
  2,
);
const trained: TrainStepInput[] = [];
let server: TestServer;
let rollout: RunningWorker;
let trainer: { worker: Worker; done: Promise<void>; connection: NativeConnection };
let client: Client;

before(async () => {
  server = await startTestServer([
    'dataset.kind=synthetic',
    'dataset.synthetic_size=16',
    'rollout.prompts_per_step=2',
    'rollout.n_samples_per_prompt=2',
    'rollout.max_turns=2',
    'rollout.concurrency=4',
    'run.steps=1',
    'run.eval_interval=0',
    'run.empty_step_retries=1',
    'run.empty_step_wait_s=0.2',
    'engines.urls=["http://127.0.0.1:9"]',
  ]);
  const cfg = server.cfg;
  rollout = await startRolloutWorker(cfg, {
    cfg,
    store: new LocalBlobStore(stateLayout(cfg.state_dir).blobs),
    engines: () => engine,
    imageProcessor: { patch_size: 16, merge_size: 2, min_pixels: 4096, max_pixels: 4096 },
  });
  const connection = await connectWorker(cfg);
  const worker = await Worker.create({
    connection,
    namespace: cfg.temporal.namespace,
    taskQueue: cfg.temporal.task_queues.trainer,
    activities: {
      train_step: async (inp: TrainStepInput) => {
        trained.push(inp);
        return {
          step: inp.step,
          weight_version: inp.step + 1,
          checkpoint: `/nowhere/step-${inp.step}`,
          already_committed: false,
          metrics: {},
        };
      },
      sync_weights: async (inp: { weight_version: number }) => ({ weight_version: inp.weight_version, engines: [] }),
      log_metrics: async () => ({ tensorboard: '', wandb: false }),
    },
  });
  trainer = { worker, connection, done: worker.run() };
  client = await connectClient(cfg);
});

after(async () => {
  await client?.connection.close();
  trainer?.worker.shutdown();
  await trainer?.done.catch(() => undefined);
  await trainer?.connection.close();
  await rollout?.stop();
  await server?.stop();
});

async function episodeIds(runId: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowType = 'episode'` }))
    if (wf.workflowId.startsWith(`episode/${runId}/`)) ids.push(wf.workflowId.slice(`episode/${runId}/`.length));
  return ids.sort();
}

test('an empty step is redone under new episode ids, then the run fails without training; continued, it trains those prompts', async () => {
  const runId = 'empty';
  await startOrContinueRun(client, server.cfg, runId);
  const failed = (await runHandle(client, runId).result()) as RunResult;
  assert.equal(failed.status, 'failed');
  assert.equal(failed.steps_done, 0);
  assert.match(
    failed.reason ?? '',
    /step 0: all 4 episodes failed in each of 2 tries \(first reason: .*-9999.*data cursor did not move/,
  );
  assert.deepEqual(failed.state.data, { epoch: 0, cursor: 0 }, 'the data cursor stayed on the failed prompts');
  assert.equal(trained.length, 0, 'nothing was trained');
  // the try and its redo: the same two prompts, samples 0–1 then 2–3
  assert.deepEqual(await episodeIds(runId), ['0/0/0', '0/0/1', '0/0/2', '0/0/3', '0/1/0', '0/1/1', '0/1/2', '0/1/3']);

  failing = false; // the engines are mended
  await startOrContinueRun(client, server.cfg, runId);
  const done = (await runHandle(client, runId).result()) as RunResult;
  assert.equal(done.status, 'completed');
  assert.equal(trained.length, 1);
  assert.equal(trained[0]!.step, 0);
  assert.deepEqual(trained[0]!.samples.map((s) => s.ref.split('/').slice(-2).join('/')).sort(), [
    '0/4.json',
    '0/5.json',
    '1/4.json',
    '1/5.json',
  ]);
  const [record] = await readStepRecords(runDir(server.cfg, runId));
  assert.equal(record!.episodes.length, 4);
  assert.ok(
    record!.episodes.every((e) => e.trained && /\/0\/[01]\/[45]$/.test(e.episode_id)),
    JSON.stringify(record!.episodes),
  );
  assert.equal(path.basename(done.checkpoint ?? ''), 'step-0');
});
