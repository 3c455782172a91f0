// The activities a training run calls: the rollout worker's (protocol/activities.ts) and the
// trainer's (workers/trainer, Python) on the run's trainer task queue.
import { proxyActivities } from '@temporalio/workflow';
import type { SyncWeightsInput, SyncWeightsOutput, TrainStepInput, TrainStepOutput } from '../lib/contract.js';
import type { RolloutActivities } from '../protocol/activities.js';

export const rolloutActs = proxyActivities<RolloutActivities>({
  startToCloseTimeout: '10 minutes',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 20 },
});

export interface TrainerActivities {
  train_step(input: TrainStepInput): Promise<TrainStepOutput>;
  sync_weights(input: SyncWeightsInput): Promise<SyncWeightsOutput>;
  log_metrics(input: {
    run_id: string;
    run_dir: string;
    step: number;
    metrics: Record<string, number>;
  }): Promise<{ tensorboard: string; wandb: boolean }>;
}

export function trainerActs(taskQueue: string): TrainerActivities {
  return proxyActivities<TrainerActivities>({
    taskQueue,
    startToCloseTimeout: '2 hours',
    // A killed trainer is noticed within the heartbeat timeout; the retry resumes from the last
    // committed checkpoint, and a step already committed returns its recorded metrics. The trainer
    // heartbeats every second from a side thread through every phase (workers/trainer/step/heartbeat.py),
    // so a short timeout cuts no long load, save or reload.
    heartbeatTimeout: '10 seconds',
    // Which trainer errors no retry can fix is decided in one place: workers/trainer/worker/activities.py
    // raises them as non-retryable ApplicationErrors.
    // Bounded: a trainer or engines that never come back end the run (failed; `tempo-rl train` of the
    // same run id continues it) instead of stalling it forever.
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 30 },
  });
}
