// The activities a training run calls: the rollout worker's (protocol/activities.ts) and the
// trainer's (workers/trainer, Python) on the run's trainer task queue.
import { proxyActivities } from '@temporalio/workflow';
import type { SyncWeightsInput, SyncWeightsOutput, TrainStepInput, TrainStepOutput } from '../lib/contract.js';
import type { RolloutActivities } from '../protocol/activities.js';

const retry = { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 20 };
const slow = proxyActivities<RolloutActivities>({ startToCloseTimeout: '10 minutes', retry });
// A task the server handed out just before it died (or whose result it never heard) is retried only
// after its timeout: these finish in milliseconds, so a Temporal server restart costs seconds, not 10 minutes.
const QUICK: Partial<Record<keyof RolloutActivities, RolloutActivities[keyof RolloutActivities]>> = (() => {
  const quick = proxyActivities<RolloutActivities>({ startToCloseTimeout: '30 seconds', retry });
  const listing = proxyActivities<RolloutActivities>({ startToCloseTimeout: '2 minutes', retry });
  return {
    listEngines: quick.listEngines,
    recordStep: quick.recordStep,
    episodeOutcomes: listing.episodeOutcomes,
  };
})();

/** The rollout worker's activities as a run calls them, each with its timeout. */
export const rolloutActs = new Proxy({} as RolloutActivities, {
  get: (_, name: keyof RolloutActivities) => QUICK[name] ?? slow[name],
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
