// A training run's step after its batch: train (Python), weight sync, eval every k steps, the step
// record; then the run state advances.
import type { TrainStepOutput } from '../lib/contract.js';
import { LOGPROB_DIFF, LOGPROB_DIFF_ALARM } from '../protocol/training-run.js';
import { runEval } from './episode-children.js';
import { rolloutActs as acts, type TrainerActivities } from './run-activities.js';
import { scheduledLr } from './sft-metrics.js';
import type { TrainBatch } from './step-sources.js';
import type { TrainingRun } from './training-run-state.js';

/** Seconds since `since` (ms). */
const secondsSince = (since: number) => (Date.now() - since) / 1000;

export async function trainAndRecord(
  run: TrainingRun,
  trainer: TrainerActivities,
  batch: TrainBatch,
  stepStarted: number,
  /** Before the new weights reach the engines (the step source's). */
  beforeSync: () => Promise<void>,
): Promise<void> {
  const { state, plan, progress } = run;
  const rolloutSeconds = secondsSince(stepStarted);
  progress.phase = 'train';
  const trainStarted = Date.now();
  const trained = await trainStep(run, trainer, batch);
  const trainSeconds = secondsSince(trainStarted);
  const evalNow = plan.eval_interval > 0 && !!state.dataset!.eval_ref && (state.step + 1) % plan.eval_interval === 0;
  progress.phase = 'rollout';
  await beforeSync();
  progress.phase = 'sync';
  const syncStarted = Date.now();
  // SFT samples nothing from the engines between its steps: they need its weights only for an eval
  // (so for SFT, engines_synced means synced once in this run, and every eval syncs first).
  const syncMetrics = plan.algorithm !== 'sft' || evalNow ? await syncWeights(run, trainer, trained) : {};
  const syncSeconds = secondsSince(syncStarted);
  let evalMetrics: Record<string, number> = {};
  if (evalNow) {
    // after the update, on the held-out split
    progress.phase = 'eval';
    evalMetrics = await runEval(state, plan, trained.weight_version, progress);
  }
  progress.phase = 'record';
  const metrics: Record<string, number> = {
    ...(state.step === 0 ? (state.start_eval ?? {}) : {}),
    ...batch.metrics,
    ...trained.metrics,
    ...evalMetrics,
    'perf/rollout_time': rolloutSeconds,
    'perf/train_time': trainSeconds,
    'perf/weight_sync_time': syncSeconds,
    ...syncMetrics,
    'sync/engines_failed': state.engines_behind?.length ?? 0,
    'perf/step_time': secondsSince(stepStarted),
  };
  metrics['perf/rollout_tokens_per_second'] =
    (metrics['rollout/total_response_tokens'] ?? 0) / Math.max(rolloutSeconds, 1e-9);
  const diff = metrics[LOGPROB_DIFF];
  if (plan.max_logprob_diff > 0 && diff !== undefined)
    metrics[LOGPROB_DIFF_ALARM] = diff > plan.max_logprob_diff ? 1 : 0;
  await acts.recordStep({
    run_id: state.run_id,
    step: state.step,
    metrics,
    weight_version: trained.weight_version,
    episodes: batch.episodes,
    data_before: state.data,
    data_after: batch.dataAfter,
  });
  await trainer.log_metrics({ run_id: state.run_id, run_dir: plan.run_dir, step: state.step, metrics });
  advance(run, trained, batch, metrics);
}

async function trainStep(run: TrainingRun, trainer: TrainerActivities, batch: TrainBatch): Promise<TrainStepOutput> {
  const { state, plan } = run;
  const w = plan.weights;
  // Engines that share the trainer's GPUs sleep while it trains (the sync after it wakes them).
  const sleeping = w.colocated_sleep_level
    ? { sleep_engines: await acts.listEngines(), engine_sleep_level: w.colocated_sleep_level }
    : {};
  return trainer.train_step({
    ...sleeping,
    run_id: state.run_id,
    step: state.step,
    run_dir: plan.run_dir,
    blob_store: plan.blob_store,
    model_path: plan.model_path,
    samples: batch.samples,
    hyper: {
      ...plan.hyper,
      lr: scheduledLr(plan.hyper.lr, plan.lr_schedule, state.step, plan.steps, plan.lr_warmup_steps),
    },
    data_cursor: batch.dataAfter,
    algorithm: plan.algorithm,
    keep_checkpoints: plan.keep_checkpoints,
    keep_checkpoint_every: plan.keep_checkpoint_every,
    checkpoint_interval: plan.checkpoint_interval,
    // The last step is always full: the run's result is a model directory (exported, evaluated, resumed).
    full_checkpoint: state.step === plan.steps - 1,
    deterministic: plan.deterministic,
    seed: plan.seed,
  });
}

/** The new weights to every engine; returns the sync's phases as step metrics. */
async function syncWeights(
  run: TrainingRun,
  trainer: TrainerActivities,
  trained: TrainStepOutput,
): Promise<Record<string, number>> {
  const engines = await acts.listEngines();
  const synced = await trainer.sync_weights(run.syncInput(trained.weight_version, trained.checkpoint, engines));
  // Labelled unusable by the sync (their tokens are retried elsewhere); the next sync tries them again.
  run.state.engines_behind = synced.engines.filter((e) => !e.ok).map((e) => e.url);
  return syncTimings(synced.timings ?? {});
}

/** The weight sync's phases as step metrics (sync/*; sync/seconds_per_gb: end to end, pause to resume). */
function syncTimings(t: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(t)) out[`sync/${k}`] = v;
  if ((t.transfer_bytes ?? 0) > 0 && t.seconds !== undefined)
    out['sync/seconds_per_gb'] = t.seconds / (t.transfer_bytes! / 1e9);
  return out;
}

/** The step is recorded: the run state moves past it. */
function advance(run: TrainingRun, trained: TrainStepOutput, batch: TrainBatch, metrics: Record<string, number>): void {
  const { state, progress } = run;
  state.start_eval = null;
  state.step += 1;
  state.data = batch.dataAfter;
  state.weight_version = trained.weight_version;
  state.checkpoint = trained.checkpoint;
  state.last_metrics = metrics;
  progress.step = state.step;
  progress.weight_version = state.weight_version;
  progress.metrics = metrics;
  run.setStatus(state.paused ? 'paused' : run.stopRequested ? 'stopping' : 'running');
  run.stepsThisRun += 1;
}
