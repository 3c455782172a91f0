// A test-only workflow (bundled by the tests' workers, never the production one): one TS activity
// (the rollout task queue) and one Python activity (the trainer task queue), both test-only
// (testing/test-contract.ts), results checked against their contract — which worker of which stack
// answered.
import { proxyActivities } from '@temporalio/workflow';
import { RolloutInfo, TrainerInfo, type TestRolloutActivities } from '../test-contract.js';

export interface RoundTripInput {
  trainer_task_queue: string;
}

export interface RoundTripResult {
  rollout: RolloutInfo;
  trainer: TrainerInfo;
}

const rollout = proxyActivities<TestRolloutActivities>({ startToCloseTimeout: '1 minute' });

export async function roundTrip(input: RoundTripInput): Promise<RoundTripResult> {
  const trainer = proxyActivities<{ trainer_info(arg: Record<string, never>): Promise<unknown> }>({
    taskQueue: input.trainer_task_queue,
    startToCloseTimeout: '2 minutes',
  });
  const [r, t] = await Promise.all([rollout.rolloutInfo(), trainer.trainer_info({})]);
  return { rollout: RolloutInfo.parse(r), trainer: TrainerInfo.parse(t) };
}
