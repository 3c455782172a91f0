// Two stacks (two state dirs) on one Temporal server and namespace: each stack's workers take only
// its own tasks, and a run continues only on the queues it started on.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import type { TempoConfig } from '../../config/schema.js';
import { configuredBlobStoreUri } from '../../lib/blob-store-config.js';
import { stateLayout } from '../../stores/layout.js';
import { initialRunState } from '../../config/run-plan.js';
import { startOrContinueRun } from '../../client/run-client.js';
import { connectClient } from '../../supervise/temporal.js';
import { roundTrip } from '../../testing/workflows/round-trip.js';
import { TRAINING_RUN_WORKFLOW_TYPE, trainingRunWorkflowId } from '../../protocol/training-run.js';
import { removeTestState } from '../../testing/state.js';
import { startRolloutWorker, startTestServer, startTrainerWorker, stopChild } from '../../testing/temporal.js';

const server = await startTestServer();
/** Another stack on the same server: its own state dir, nothing else set. */
function otherStack(): TempoConfig {
  const env = { ...process.env };
  delete env.TEMPORAL_ADDRESS;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-test-'));
  return loadConfig({
    env,
    sets: [`state_dir=${dir}`, `server.port=${server.cfg.server.port}`, `server.ui_port=${server.cfg.server.ui_port}`],
  });
}
const a = server.cfg;
const b = otherStack();
const idle = otherStack(); // no workers: what is started on its queues waits there
const workers = await Promise.all([startRolloutWorker(a), startRolloutWorker(b)]);
const trainers = [startTrainerWorker(a), startTrainerWorker(b)];
const client = await connectClient(a);
after(async () => {
  await Promise.all([...workers.map((w) => w.stop()), ...trainers.map((t) => stopChild(t))]);
  await server.stop();
  removeTestState(b.state_dir);
  removeTestState(idle.state_dir);
});

test('the default task queues differ per state dir', () => {
  for (const kind of ['rollout', 'trainer'] as const) {
    assert.notEqual(a.temporal.task_queues[kind], b.temporal.task_queues[kind]);
    assert.ok(a.temporal.task_queues[kind].startsWith(`${kind}-`), a.temporal.task_queues[kind]);
  }
});

test('every task of a stack is taken by its own rollout and trainer workers', { timeout: 300_000 }, async () => {
  // Interleaved, several each: with shared queues about half would land on the other stack's workers.
  const trips = [a, b, a, b, a, b, a, b].map(async (cfg, i) => {
    const result = await client.workflow.execute(roundTrip, {
      taskQueue: cfg.temporal.task_queues.rollout,
      workflowId: `isolation-${i}-${Date.now()}`,
      args: [{ trainer_task_queue: cfg.temporal.task_queues.trainer }],
    });
    return { cfg, result };
  });
  for (const { cfg, result } of await Promise.all(trips)) {
    const own = configuredBlobStoreUri(cfg);
    assert.equal(result.rollout.blob_store, own, "the rollout activity ran on the stack's own worker");
    assert.equal(result.trainer.blob_store, own, "the trainer activity ran on the stack's own worker");
  }
});

test('a run continues on the queues it started on; another stack is refused, naming both', async () => {
  const runId = `isolation-run-${Date.now()}`;
  const first = await client.workflow.start(TRAINING_RUN_WORKFLOW_TYPE, {
    taskQueue: idle.temporal.task_queues.rollout,
    workflowId: trainingRunWorkflowId(runId),
    args: [initialRunState(idle, runId)],
  });
  await first.terminate('the test stands for a run that stopped');
  await assert.rejects(startOrContinueRun(client, b, runId), (err: Error & { exitCode?: number }) => {
    assert.equal(err.exitCode, 2);
    for (const q of [
      idle.temporal.task_queues.rollout,
      idle.temporal.task_queues.trainer,
      b.temporal.task_queues.rollout,
      b.temporal.task_queues.trainer,
    ])
      assert.ok(err.message.includes(q), `${q} in: ${err.message}`);
    assert.ok(err.message.includes(stateLayout(idle.state_dir).blobs), err.message);
    return true;
  });
  const again = await startOrContinueRun(client, idle, runId);
  assert.equal(again.resumedFromStep, 0);
  const handle = client.workflow.getHandle(trainingRunWorkflowId(runId));
  assert.equal((await handle.describe()).taskQueue, idle.temporal.task_queues.rollout);
  await handle.terminate('done');
});
