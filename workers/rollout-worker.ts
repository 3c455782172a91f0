// The TypeScript worker: all workflows and the rollout activities, on the stack's rollout task queue
// (temporal.task_queues.rollout).
import { fileURLToPath } from 'node:url';
import { ApplicationFailure } from '@temporalio/common';
import { Worker } from '@temporalio/worker';
import type { TempoConfig } from '../config/schema.js';
import { InflightLedger, WORKER_DIED } from './inflight.js';
import { KillPoints, killPointsFromEnv } from '../supervise/kill-points.js';
import type { RunSinks } from '../protocol/training-run.js';
import type { InjectedSinks } from '@temporalio/worker';
import { cachedWorkflowBundle } from './workflow-bundle.js';
import { childLogger } from '../lib/log.js';
import { stateLayout } from '../lib/paths.js';
import { connectClient, connectWorker } from '../lib/temporal.js';
import { installTemporalRuntime } from './temporal-runtime.js';
import { createActivities, rolloutDeps, type RolloutDeps } from '../activities/index.js';

const log = childLogger('rollout-worker');
export const WORKFLOWS_PATH = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));
// A killed worker's sticky workflow tasks move to the shared queue after this (the SDK's default is
// 10 s); a live but busy worker loses nothing but a replay of a short history.
const STICKY_TIMEOUT = '3 seconds';

/** Fails the activities that dead rollout workers of this stack left running on this host (workers/inflight.ts). */
async function failOverDeadWorkers(cfg: TempoConfig, ledger: InflightLedger): Promise<void> {
  const client = await connectClient(cfg);
  try {
    const done = await ledger.failOverDead(async (token, reason, entry) => {
      // The workflow's next task goes to the shared queue at once, not to the dead worker's sticky queue.
      await client.workflowService
        .resetStickyTaskQueue({ namespace: cfg.temporal.namespace, execution: { workflowId: entry.workflow_id } })
        .catch(() => undefined);
      await client.activity.fail(token, ApplicationFailure.retryable(reason, WORKER_DIED));
    });
    if (done.length)
      log.warn(
        { activities: done.map((e) => `${e.workflow_id}/${e.activity_type}`) },
        'failed over the activities of a dead rollout worker',
      );
  } finally {
    await client.connection.close();
  }
}

/** `workflowsPath`: the workflows to bundle (tests add their own to the production ones). */
export async function createRolloutWorker(
  cfg: TempoConfig,
  deps?: RolloutDeps,
  workflowsPath = WORKFLOWS_PATH,
): Promise<Worker> {
  deps ??= await rolloutDeps(cfg);
  installTemporalRuntime();
  const ledger = new InflightLedger(stateLayout(cfg.state_dir).inflight('rollout'));
  const failedOver = failOverDeadWorkers(cfg, ledger).catch((err) =>
    log.warn({ err: (err as Error).message }, "could not fail over dead workers' activities"),
  );
  const kills = new KillPoints(killPointsFromEnv());
  const sinks: InjectedSinks<RunSinks> = {
    killPoints: { reach: { fn: (info, name) => kills.reach(name, info.workflowId) } },
  };
  const connection = await connectWorker(cfg);
  const worker = await Worker.create({
    connection,
    namespace: cfg.temporal.namespace,
    taskQueue: cfg.temporal.task_queues.rollout,
    workflowBundle: await cachedWorkflowBundle(workflowsPath),
    activities: createActivities(deps),
    interceptors: { activity: [ledger.interceptor(), ...(kills.points.length ? [kills.interceptor()] : [])] },
    sinks,
    maxConcurrentActivityTaskExecutions: Math.max(4, cfg.rollout.concurrency * 2),
    stickyQueueScheduleToStartTimeout: STICKY_TIMEOUT,
  });
  await failedOver;
  return worker;
}

export async function runRolloutWorker(cfg: TempoConfig): Promise<void> {
  const worker = await createRolloutWorker(cfg);
  log.info({ taskQueue: cfg.temporal.task_queues.rollout, pid: process.pid }, 'rollout worker running');
  await worker.run();
  new InflightLedger(stateLayout(cfg.state_dir).inflight('rollout')).close();
}
