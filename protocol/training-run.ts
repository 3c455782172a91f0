// The trainingRun workflow's contract: its state (which is also its input, so a new run continues
// exactly where the last stopped), its updates, its query and its search attributes. Pure: it imports
// nothing from workflows/ or activities/ (both use it), only types from lib/ and config/.
import { defineQuery, defineUpdate, type Sinks } from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { DataCursor } from '../lib/prompt-order.js';
import type { TrainHyper } from '../lib/contract.js';
import type { DatasetConfig } from '../config/schema.js';
import type { EpisodeInput, EpisodeSettings, EpisodeSummary } from './episode.js';
import type { SftBatchResult } from './activities.js';

export const TRAINING_RUN_WORKFLOW_TYPE = 'trainingRun';
export const STATUS_ATTR = defineSearchAttributeKey('TempoRlStatus', 'KEYWORD');
export const STEP_ATTR = defineSearchAttributeKey('TempoRlStep', 'INT');

/** What a run's workflow tells its worker outside its history: the points the code names, where a
 *  certification run may SIGKILL the worker (supervise/kill-points.ts). */
export interface RunSinks extends Sinks {
  killPoints: { reach(name: string): void };
}

export type RunStatus = 'running' | 'pausing' | 'paused' | 'stopping' | 'stopped' | 'completed' | 'failed';

/** The step's mean |trainer − engine| logprob of the sampled tokens (the trainer's metric), and the flag
 *  the workflow sets when it is above grpo.max_logprob_diff. */
export const LOGPROB_DIFF = 'train/train_rollout_logprob_abs_diff';
export const LOGPROB_DIFF_ALARM = 'train/logprob_diff_alarm';

/** The warning for a step whose logprob |diff| crossed the bound, or null (one sentence for the log, the
 *  step line and status). */
export function logprobDiffWarning(step: number, m: Record<string, number>, bound?: number): string | null {
  if (m[LOGPROB_DIFF_ALARM] !== 1) return null;
  return (
    `WARNING step ${step}: the trainer's logprobs differ from the engine's by ${m[LOGPROB_DIFF]?.toFixed(4)} on average` +
    `${bound ? ` (grpo.max_logprob_diff ${bound})` : ''}: the engine drifts from the policy it serves; importance ratios and clipping are off (docs/engines.md "CUDA graphs")`
  );
}

/** Every field that config/run-plan.ts always writes is required (each recorded plan of
 *  tests/fixtures/histories has them): a default of the workflow's own would shadow the config's. The
 *  optional ones exist only for some runs (sft_*: algorithm sft; colocated_sleep_level: engines.colocate). */
export interface RunPlan {
  algorithm: 'grpo' | 'sft';
  /** algorithm sft: the JSONL of SFT records (prompts_per_step is then sft.batch_size, hyper.lr sft.lr). */
  sft_path?: string;
  /** sft.render_ahead; absent: true. */
  sft_render_ahead?: boolean;
  /** Evaluate the starting weights before step 0 (reported in step 0's metrics as eval_start/*). */
  eval_at_start: boolean;
  keep_checkpoints: number;
  keep_checkpoint_every: number;
  /** run.checkpoint_interval (1: a full checkpoint every step). */
  checkpoint_interval: number;
  /** run.empty_step_retries / run.empty_step_wait_s. */
  empty_step_retries: number;
  empty_step_wait_s: number;
  /** sft.lr_schedule or grpo.lr_schedule; cosine: hyper.lr decays to a tenth from the end of the
   *  warm-up to the last step (workflows/sft-metrics.ts scheduledLr). */
  lr_schedule: 'constant' | 'cosine' | 'wsd';
  /** GRPO's linear warm-up (grpo.lr_warmup_steps; 0 for SFT). */
  lr_warmup_steps: number;
  steps: number;
  /** rollout.prompt_order stratified: each step's prompts balanced over the dataset's strata (its
   *  DatasetInfo.train_strata). Absent (shuffle, and plans before the key): the plain shuffle. */
  prompt_order?: 'stratified';
  prompts_per_step: number;
  n_samples_per_prompt: number;
  concurrency: number;
  zero_std_filter: boolean;
  /** grpo.max_logprob_diff: above it a step's train/rollout logprob |diff| raises train/logprob_diff_alarm (0: off). */
  max_logprob_diff: number;
  eval_interval: number;
  eval_prompts: number;
  steps_per_workflow_run: number;
  seed: number;
  /** run.deterministic: the async window samples step s from exactly the weights of step s − k (its
   *  sync waits for those episodes), and the trainer seeds and fixes each step (docs/certification.md). */
  deterministic: boolean;
  episode: EpisodeSettings;
  eval_episode: EpisodeSettings;
  hyper: TrainHyper;
  model_path: string;
  run_dir: string;
  /** The claim-check store's URI (blobs.uri). */
  blob_store: string;
  trainer_task_queue: string;
  system_prompt: string | null;
  dataset: DatasetConfig;
  /** How weight syncs reach the engines (engines.weight_transport with auto resolved, the engines'
   *  dtype, engines.ipc_bucket_mb, engines.ipc_load) and, for engines that share the trainer's GPUs
   *  (engines.colocate), how they sleep while it trains. */
  weights: {
    transport: 'disk' | 'ipc';
    engine_dtype: 'float32' | 'bfloat16';
    ipc_bucket_mb: number;
    ipc_load: 'auto' | 'layerwise';
    colocated_sleep_level?: 1 | 2;
  };
}

/** The episodes one train step consumes, dispatched ahead of it (the async window). */
export interface WindowBatch {
  /** The train step that consumes this batch (its episodes' ids carry it). */
  step: number;
  data_before: DataCursor;
  data_after: DataCursor;
  prompts: Array<{ prompt: EpisodeInput['prompt']; label: string; env_state?: EpisodeInput['env_state'] }>;
  /** Sample indices first_sample .. first_sample + n - 1 (a redone empty step samples new ids). */
  first_sample: number;
}

export interface RolloutWindow {
  /** The data cursor after the last batch dispatched (state.data is the cursor of what was trained). */
  dispatched: DataCursor;
  batches: WindowBatch[];
  /** Episode id → the weight version it was started on. */
  started: Record<string, number>;
  finished: Record<string, EpisodeSummary>;
}

export interface DatasetInfo {
  train_ref: string;
  train_size: number;
  /** One stratum a train row; present only when the plan asked for them (prompt_order stratified):
   *  selectPrompts then deals the strata in turn. Absent: the plain shuffle. */
  train_strata?: number[];
  eval_ref: string | null;
  eval_size: number;
}

export interface RunState {
  run_id: string;
  plan: RunPlan;
  /** The next step to run (0-based); the run is complete when step == plan.steps. */
  step: number;
  data: DataCursor;
  weight_version: number;
  checkpoint: string | null;
  dataset: DatasetInfo | null;
  paused: boolean;
  /** False when the engines may hold other weights (a new or resumed run): synced before step 1. */
  engines_synced: boolean;
  last_metrics: Record<string, number>;
  /** Engines the last weight sync could not bring to the current version. */
  engines_behind?: string[];
  /** Tries of the current step in which every episode failed (its redo samples new episode ids). */
  empty_redos?: number;
  /** The start-of-run eval (eval_start/*), kept until step 0 is recorded. */
  start_eval?: Record<string, number> | null;
  /** rollout.max_staleness > 0: the batches dispatched ahead of training and their episodes (data is
   *  then the cursor of what was trained, window.dispatched that of what was dispatched). */
  window?: RolloutWindow;
  /** algorithm sft: the next step's batch, rendered while the step before trained and carried across
   *  a continue-as-new (used only for that step and those records). */
  sft_next?: SftAhead | null;
}

export interface SftAhead {
  step: number;
  indices: number[];
  batch: SftBatchResult;
}

export interface RunProgress {
  run_id: string;
  status: RunStatus;
  step: number;
  steps_total: number;
  phase: 'dataset' | 'rollout' | 'train' | 'sync' | 'record' | 'eval' | 'idle';
  episodes_done: number;
  episodes_total: number;
  weight_version: number;
  metrics: Record<string, number>;
}

export interface RunResult {
  run_id: string;
  /** The state to start a new run from (continues exactly where this one stopped). */
  state: RunState;
  status: RunStatus;
  steps_done: number;
  weight_version: number;
  checkpoint: string | null;
  last_metrics: Record<string, number>;
  /** Why the run ended 'failed' (an empty step past run.empty_step_retries), or what a completed run left undone. */
  reason?: string;
}

export interface Ack {
  accepted: boolean;
  status: RunStatus;
  message: string;
}

/** after_step: finish the current step, then wait. now: cancel in-flight episodes, wait, redo them. */
export const pauseUpdate = defineUpdate<Ack, [{ mode: 'after_step' | 'now' }]>('pause');
export const resumeUpdate = defineUpdate<Ack, []>('resume');
/** Finish the current step (its train step and weight sync), then end the run. */
export const stopUpdate = defineUpdate<Ack, []>('stop');
export const progressQuery = defineQuery<RunProgress>('progress');
/** The error type of an update its validator refused (client/run-client.ts turns it into an Ack that is not accepted). */
export const REFUSED = 'Refused';

export function trainingRunWorkflowId(runId: string): string {
  return `run/${runId}`;
}

/** The phase times every step records (seconds), in the order a step runs them. */
export const STEP_TIME_KEYS = [
  'perf/rollout_time',
  'perf/train_time',
  'perf/weight_sync_time',
  'perf/step_time',
] as const;

/** The run id of a training-run workflow id (the inverse of trainingRunWorkflowId). */
export function runIdOf(workflowId: string): string {
  return workflowId.replace(/^run\//, '');
}
