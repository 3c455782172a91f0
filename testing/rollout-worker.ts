// The tests' rollout worker: the product's (rollout/worker.ts) with what only tests use — the
// test workflows (testing/workflows), the test activities (testing/test-activities.ts) and the test
// environments (testing/environments.ts, registered before the config is read: a config may name
// one). In a test's process (testing/temporal.ts startRolloutWorker) or as a process of its own
// (testing/run.ts), which a test can SIGKILL:
//   node --import tsx testing/rollout-worker.ts CONFIG
import { fileURLToPath } from 'node:url';
import type { Worker } from '@temporalio/worker';
import type { RolloutDeps } from '../activities/index.js';
import { loadConfig } from '../config/load.js';
import type { TempoConfig } from '../config/schema.js';
import { createRolloutWorker, runRolloutWorker, type RolloutWorkerExtras } from '../rollout/worker.js';
import { registerTestEnvironments } from './environments.js';
import { testActivities } from './test-activities.js';
import { TEST_WORKFLOWS_PATH } from './test-workflows.js';

export const TEST_ROLLOUT_WORKER = fileURLToPath(import.meta.url);

const TEST_EXTRAS: RolloutWorkerExtras = {
  workflowsPath: TEST_WORKFLOWS_PATH,
  activities: (deps) => ({ ...testActivities(deps) }),
};

export async function createTestRolloutWorker(cfg: TempoConfig, deps?: RolloutDeps): Promise<Worker> {
  registerTestEnvironments();
  return createRolloutWorker(cfg, deps, TEST_EXTRAS);
}

if (process.argv[1] === TEST_ROLLOUT_WORKER) {
  const file = process.argv[2];
  if (!file) throw new Error('usage: node --import tsx testing/rollout-worker.ts CONFIG');
  registerTestEnvironments();
  await runRolloutWorker(loadConfig({ file }), TEST_EXTRAS);
}
