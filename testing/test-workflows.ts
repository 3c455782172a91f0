// Where the tests' workflow bundle starts (testing/workflows: production workflows and test-only ones).
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import proto from '@temporalio/proto';

export const TEST_WORKFLOWS_PATH = fileURLToPath(new URL('./workflows/index.ts', import.meta.url));

/** The pids of the workers that poll `queue` for workflow or activity tasks (identity `pid@host`, the
 *  SDKs' default): a production worker, which runs no test-only workflow, is seen by its polls. */
export async function pollerPids(
  client: Client,
  namespace: string,
  queue: string,
  kind: 'workflow' | 'activity',
): Promise<number[]> {
  const { TaskQueueType } = proto.temporal.api.enums.v1;
  const taskQueueType =
    kind === 'workflow' ? TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW : TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY;
  const res = await client.workflowService.describeTaskQueue({ namespace, taskQueue: { name: queue }, taskQueueType });
  return (res.pollers ?? []).map((p) => Number.parseInt(p.identity ?? '', 10)).filter((pid) => Number.isInteger(pid));
}
