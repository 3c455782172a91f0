// The first cross-language round trip: a TS workflow calls a TS activity (queue "rollout") and a
// Python activity (queue "trainer") on a real Temporal server, with both workers running.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { connectClient } from '../../supervise/temporal.js';
import { roundTrip } from '../../testing/workflows/round-trip.js';
import { startRolloutWorker, startTestServer, startTrainerWorker, stopChild } from '../../testing/temporal.js';

const server = await startTestServer();
const rollout = await startRolloutWorker(server.cfg);
const trainer = startTrainerWorker(server.cfg);
after(async () => {
  await rollout.stop();
  await stopChild(trainer);
  await server.stop();
});

test('a workflow gets answers from the TS and the Python worker', { timeout: 300_000 }, async () => {
  const client = await connectClient(server.cfg);
  const result = await client.workflow.execute(roundTrip, {
    taskQueue: server.cfg.temporal.task_queues.rollout,
    workflowId: `round-trip-${Date.now()}`,
    args: [{ trainer_task_queue: server.cfg.temporal.task_queues.trainer }],
  });
  assert.equal(result.rollout.node_version, process.version);
  assert.match(result.trainer.torch_version, /^2\./);
  assert.equal(result.trainer.device, 'cpu');
  assert.equal(result.trainer.cuda_available, false);
  assert.match(result.trainer.python_version, /^3\.1[12]/);
});
