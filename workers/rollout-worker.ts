// The TypeScript worker: all workflows and the rollout activities, on the stack's rollout task queue
// (temporal.task_queues.rollout).
import { fileURLToPath } from 'node:url';
import { Worker } from '@temporalio/worker';
import type { TempoConfig } from '../config/schema.js';
import { childLogger } from '../lib/log.js';
import { connectWorker } from '../lib/temporal.js';
import { installTemporalRuntime } from '../lib/temporal-runtime.js';
import { createActivities, rolloutDeps, type RolloutDeps } from '../activities/index.js';

const log = childLogger('rollout-worker');
export const WORKFLOWS_PATH = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

export async function createRolloutWorker(cfg: TempoConfig, deps: RolloutDeps = rolloutDeps(cfg)): Promise<Worker> {
  installTemporalRuntime();
  const connection = await connectWorker(cfg);
  return Worker.create({
    connection,
    namespace: cfg.temporal.namespace,
    taskQueue: cfg.temporal.task_queues.rollout,
    workflowsPath: WORKFLOWS_PATH,
    activities: createActivities(deps),
    maxConcurrentActivityTaskExecutions: Math.max(4, cfg.rollout.concurrency * 2),
    bundlerOptions: { ignoreModules: [] },
  });
}

export async function runRolloutWorker(cfg: TempoConfig): Promise<void> {
  const worker = await createRolloutWorker(cfg);
  log.info({ taskQueue: cfg.temporal.task_queues.rollout, pid: process.pid }, 'rollout worker running');
  await worker.run();
}
