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
import { childLogger } from '../base/log.js';
import { stateLayout } from '../stores/layout.js';
import { connectClient, connectWorker } from '../supervise/temporal.js';
import { installTemporalRuntime } from './temporal-runtime.js';
import { createActivities, rolloutDeps, type RolloutDeps } from '../activities/index.js';

const log = childLogger('rollout-worker');
export const WORKFLOWS_PATH = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));
// A killed worker's sticky workflow tasks move to the shared queue after this (the SDK's default is
// 10 s); a live but busy worker loses nothing but a replay of a short history.
const STICKY_TIMEOUT = '3 seconds';

/** Workflow tasks one process runs at once (the SDK's default, kept on purpose): a process runs its
 *  workflow code on one thread, and at 512 episodes in flight one process was CPU-bound (about 1.3
 *  cores) with its workflow tasks queued for seconds — more slots would only queue them inside it;
 *  more processes (rollout.worker_processes) take the load. A task's local activities hold its slot
 *  while they run, so this also bounds the quick steps (renders) a process sends the engines at once. */
export const WORKFLOW_TASK_SLOTS = 40;
/** Workflow task polls a process keeps open (the SDK's default: 8 on its sticky queue, 2 shared). */
export const WORKFLOW_TASK_POLLS = 10;

/** How one rollout worker process takes work (each of rollout.worker_processes has these). */
export interface RolloutWorkerSlots {
  workflowTasks: number;
  workflowTaskPolls: number;
  activities: number;
  localActivities: number;
  cachedWorkflows: number;
}

/** The slots of one rollout worker process (docs/benchmarks.md "512 episodes in flight"). */
export function rolloutWorkerSlots(cfg: Pick<TempoConfig, 'rollout'>): RolloutWorkerSlots {
  const inFlight = cfg.rollout.concurrency * (1 + cfg.rollout.max_staleness);
  return {
    workflowTasks: WORKFLOW_TASK_SLOTS,
    workflowTaskPolls: WORKFLOW_TASK_POLLS,
    // Generate waits on the engine: a slot for every episode in flight, and as many for retries.
    activities: Math.max(4, cfg.rollout.concurrency * 2),
    // A workflow task runs one local activity at a time.
    localActivities: WORKFLOW_TASK_SLOTS,
    // Every episode in flight (the async window's too) may be this process's (sticky queues keep it
    // here), and one evicted from the cache is replayed from its history at its next task: room for
    // twice that (an eval's episodes beside a step's, the runs' own workflows).
    cachedWorkflows: Math.max(WORKFLOW_TASK_SLOTS, 2 * inFlight),
  };
}

/** Fails the activities that dead rollout workers of this stack left running on this host (rollout/inflight.ts). */
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

/** What a worker serves beside the product's activities and workflows: the tests' worker
 *  (testing/rollout-worker.ts) bundles its own workflows and adds its own activities. */
export interface RolloutWorkerExtras {
  /** The workflows to bundle (default: the product's, workflows/index.ts). */
  workflowsPath?: string;
  /** More activities, by name, beside createActivities'. */
  activities?: (deps: RolloutDeps) => Record<string, (...args: never[]) => Promise<unknown>>;
}

export async function createRolloutWorker(
  cfg: TempoConfig,
  deps?: RolloutDeps,
  extras: RolloutWorkerExtras = {},
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
  const slots = rolloutWorkerSlots(cfg);
  const worker = await Worker.create({
    connection,
    namespace: cfg.temporal.namespace,
    taskQueue: cfg.temporal.task_queues.rollout,
    workflowBundle: await cachedWorkflowBundle(extras.workflowsPath ?? WORKFLOWS_PATH),
    activities: { ...createActivities(deps), ...extras.activities?.(deps) },
    interceptors: { activity: [ledger.interceptor(), ...(kills.points.length ? [kills.interceptor()] : [])] },
    sinks,
    maxConcurrentWorkflowTaskExecutions: slots.workflowTasks,
    maxConcurrentWorkflowTaskPolls: slots.workflowTaskPolls,
    maxConcurrentActivityTaskExecutions: slots.activities,
    maxConcurrentLocalActivityExecutions: slots.localActivities,
    maxCachedWorkflows: slots.cachedWorkflows,
    stickyQueueScheduleToStartTimeout: STICKY_TIMEOUT,
  });
  await failedOver;
  return worker;
}

export async function runRolloutWorker(cfg: TempoConfig, extras: RolloutWorkerExtras = {}): Promise<void> {
  const worker = await createRolloutWorker(cfg, undefined, extras);
  log.info({ taskQueue: cfg.temporal.task_queues.rollout, pid: process.pid }, 'rollout worker running');
  await worker.run();
  new InflightLedger(stateLayout(cfg.state_dir).inflight('rollout')).close();
}
