// `tempo-rl worker stop` stops this stack's background workers (and no other stack's), and `tempo-rl
// stop RUN` of a run started with `train --detach` stops what that start started once the run has
// ended — unless another run of the stack still runs on it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { loadConfig, withSets } from '../../config/load.js';
import type { TempoConfig } from '../../config/schema.js';
import { detachedStart, recordDetachedStart } from '../../client/detached-run.js';
import { REPO_ROOT } from '../../base/paths.js';
import { stateLayout } from '../../stores/layout.js';
import { isAlive, waitFor } from '../../supervise/process.js';
import { initialRunState } from '../../config/run-plan.js';
import { ensureStack, startWorker, stopWorkers, workerPid, workerStatuses } from '../../supervise/stack.js';
import { connectClient } from '../../supervise/temporal.js';
import { healthStub } from '../../testing/health-stub.js';
import { pollerPids } from '../../testing/test-workflows.js';
import { progressQuery, TRAINING_RUN_WORKFLOW_TYPE, trainingRunWorkflowId } from '../../protocol/training-run.js';
import { removeTestState } from '../../testing/state.js';
import { startTestServer } from '../../testing/temporal.js';

// External engines (only their /health is asked, before a stack starts): ensureStack then starts only the workers.
const engine = await healthStub();
const server = await startTestServer([`engines.urls=["${engine.url}"]`]);
// Two rollout worker processes, as rollout.worker_processes asks.
const cfg = withSets(server.cfg, ['rollout.worker_processes=2']);
const env = { ...process.env };
delete env.TEMPORAL_ADDRESS;
const other: TempoConfig = loadConfig({
  env,
  sets: [
    `state_dir=${mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-test-'))}`,
    `server.port=${cfg.server.port}`,
    `server.ui_port=${cfg.server.ui_port}`,
  ],
});
const client = await connectClient(cfg);
after(async () => {
  await stopWorkers(cfg);
  await stopWorkers(other);
  await server.stop();
  await engine.close();
  removeTestState(other.state_dir);
});

const cfgFile = path.join(server.stateDir, 'test-config.json');
writeFileSync(cfgFile, JSON.stringify(cfg));
/** The CLI on this stack's config; stdout parsed as the one JSON object of --json. */
function cli(...args: string[]): Record<string, unknown> {
  const out = execFileSync(
    process.execPath,
    ['--import', 'tsx', path.join(REPO_ROOT, 'cli', 'main.ts'), '-c', cfgFile, ...args],
    { cwd: REPO_ROOT, env, encoding: 'utf8' },
  );
  return JSON.parse(out) as Record<string, unknown>;
}

/** The stack's background workers, every rollout worker process among them, poll its own queues. */
async function workersAnswer(): Promise<void> {
  const q = cfg.temporal.task_queues;
  const rollout = workerStatuses(cfg).find((w) => w.kind === 'rollout')!.pids;
  assert.equal(rollout.length, 2, `two rollout worker processes recorded: ${rollout}`);
  await waitFor(
    async () => {
      const polling = await pollerPids(client, cfg.temporal.namespace, q.rollout, 'workflow');
      return rollout.every((pid) => polling.includes(pid));
    },
    'both background rollout workers polling',
    60_000,
  );
  await waitFor(
    async () =>
      (await pollerPids(client, cfg.temporal.namespace, q.trainer, 'activity')).includes(workerPid(cfg, 'trainer')!),
    'the background trainer polling',
    120_000,
  );
}

/** A training run waiting paused on this stack's queue (no dataset work, no engines). */
async function pausedRun(runId: string) {
  const state = {
    ...initialRunState(cfg, runId),
    paused: true,
    engines_synced: true,
    dataset: { train_ref: 'blob:named/none', train_size: 1, eval_ref: null, eval_size: 0 },
  };
  const handle = await client.workflow.start(TRAINING_RUN_WORKFLOW_TYPE, {
    taskQueue: cfg.temporal.task_queues.rollout,
    workflowId: trainingRunWorkflowId(runId),
    args: [state],
  });
  await waitFor(
    async () => (await handle.query(progressQuery).catch(() => null))?.status === 'paused',
    `run ${runId} paused`,
    120_000,
  );
  return handle;
}

test("worker stop stops this stack's background workers and leaves another stack's", { timeout: 300_000 }, async () => {
  const otherPid = startWorker(other, 'rollout');
  const started = await ensureStack(cfg);
  assert.deepEqual(started, { server: false, engines: false, rollout: true, trainer: true, environments: false });
  await workersAnswer();
  const standbys = workerStatuses(cfg).find((w) => w.kind === 'trainer')!.standby_pids;
  assert.equal(standbys.length, cfg.run.trainer_standbys, "the trainer's standbys run beside it");
  const rollouts = workerStatuses(cfg).find((w) => w.kind === 'rollout')!.pids;
  const pids = [...rollouts, workerPid(cfg, 'trainer'), ...standbys];
  assert.ok(
    pids.every((p) => p !== null),
    `all recorded: ${pids}`,
  );
  assert.deepEqual(
    workerStatuses(cfg).map((w) => [w.kind, w.running, w.task_queue]),
    [
      ['rollout', true, cfg.temporal.task_queues.rollout],
      ['trainer', true, cfg.temporal.task_queues.trainer],
      // Started only for a run of a Python environment (python_env).
      ['environments', false, cfg.temporal.task_queues.environments],
    ],
  );

  assert.deepEqual(cli('worker', 'stop', '--json'), { stopped: ['rollout', 'trainer'] });
  assert.ok(
    pids.every((p) => !isAlive(p!)),
    'every worker process is gone: both rollout workers, the trainer and its standby',
  );
  assert.deepEqual(cli('worker', 'status', '--json').workers, workerStatuses(cfg));
  assert.ok(workerStatuses(cfg).every((w) => !w.running));
  assert.ok(isAlive(otherPid) && workerPid(other, 'rollout') === otherPid, "the other stack's worker still runs");
  assert.deepEqual(cli('worker', 'stop', '--json'), { stopped: [] });
  await stopWorkers(other);
});

test('stop RUN of a detached run stops what its start started, once no run of the stack needs it', {
  timeout: 300_000,
}, async () => {
  const started = await ensureStack(cfg);
  assert.ok(started.rollout && started.trainer);
  await workersAnswer();
  const pids = [...workerStatuses(cfg).find((w) => w.kind === 'rollout')!.pids, workerPid(cfg, 'trainer')!];
  recordDetachedStart(cfg, 'detached-1', started);
  const first = await pausedRun('detached-1');
  const second = await pausedRun('detached-2');

  // The first has ended already; the second still runs on these workers: they are kept, for it.
  await first.terminate('ended meanwhile');
  const kept = cli('stop', 'detached-1', '--json');
  assert.deepEqual(kept.detached, {
    stopped: [],
    kept: ['rollout worker', 'trainer worker'],
    kept_for: ['detached-2'],
  });
  assert.ok(pids.every(isAlive), 'the workers still run');
  assert.equal(detachedStart(cfg, 'detached-1'), null);
  assert.deepEqual(detachedStart(cfg, 'detached-2'), started);

  // Stopping the last run of the stack stops it (after its step), then the workers.
  const stopped = cli('stop', 'detached-2', '--json');
  assert.equal(stopped.accepted, true);
  assert.deepEqual(stopped.detached, { stopped: ['rollout worker', 'trainer worker'], kept: [], kept_for: [] });
  assert.equal((await second.describe()).status.name, 'COMPLETED');
  assert.ok(
    pids.every((p) => !isAlive(p)),
    'the workers are gone',
  );
  assert.equal(detachedStart(cfg, 'detached-2'), null);
});

test('a stack whose engines cannot start leaves no worker behind (the workers boot beside the engines)', {
  timeout: 120_000,
}, async () => {
  // engines.base_port taken by a process tempo-rl did not start: startEngines refuses at once.
  const squatter = net.createServer().listen(0, '127.0.0.1');
  await once(squatter, 'listening');
  const port = (squatter.address() as net.AddressInfo).port;
  const own: TempoConfig = loadConfig({
    env,
    sets: [
      `state_dir=${mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-test-'))}`,
      `temporal.address=${cfg.server.ip}:${cfg.server.port}`,
      'engines.count=1',
      `engines.base_port=${port}`,
    ],
  });
  try {
    await assert.rejects(ensureStack(own), new RegExp(`port ${port} is taken`));
    const logs = stateLayout(own.state_dir).workers;
    assert.ok(
      existsSync(path.join(logs, 'rollout.log')) && existsSync(path.join(logs, 'trainer.log')),
      'the workers were started before the engines',
    );
    assert.deepEqual(
      workerStatuses(own).map((w) => [w.kind, w.running]),
      [
        ['rollout', false],
        ['trainer', false],
        ['environments', false],
      ],
      'and stopped when the engines could not start',
    );
  } finally {
    squatter.close();
    await stopWorkers(own);
    removeTestState(own.state_dir);
  }
});
