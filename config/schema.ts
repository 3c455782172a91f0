// The one config tree of tempo-rl. Every key is snake_case (the same names in YAML, in the
// TEMPO_RL__* environment variables and in the Python trainer's contract). Objects are strict: an
// unknown key is an error, never ignored.
import { z } from 'zod';

const port = z.number().int().min(1).max(65535);
const positiveInt = z.number().int().positive();

export const TemporalConfig = z
  .strictObject({
    /** host:port of the frontend. Empty: the embedded dev server of `tempo-rl server`. */
    address: z.string().default(''),
    namespace: z.string().min(1).default('default'),
    api_key: z.string().default(''),
    tls: z
      .strictObject({
        enabled: z.boolean().default(false),
        client_cert_path: z.string().default(''),
        client_key_path: z.string().default(''),
        server_ca_cert_path: z.string().default(''),
        server_name: z.string().default(''),
      })
      .prefault({}),
    task_queues: z
      .strictObject({
        rollout: z.string().min(1).default('rollout'),
        trainer: z.string().min(1).default('trainer'),
      })
      .prefault({}),
  })
  .prefault({});

export const ServerConfig = z
  .strictObject({
    ip: z.string().default('127.0.0.1'),
    port: port.default(7233),
    ui_port: port.default(8233),
  })
  .prefault({});

export const ModelConfig = z
  .strictObject({
    /** A local checkpoint directory or a Hugging Face id. Empty: the generated tiny model. */
    path: z.string().default(''),
    tiny_seed: z.number().int().nonnegative().default(0),
    dtype: z.enum(['float32', 'bfloat16', 'float16']).default('float32'),
    num_gpus: z.number().int().nonnegative().default(0),
  })
  .prefault({});

export const EnginesConfig = z
  .strictObject({
    /** External engines (OpenAI-compatible vLLM servers). When set, nothing is started. */
    urls: z.array(z.url()).default([]),
    count: positiveInt.default(1),
    base_port: port.default(8100),
    max_model_len: positiveInt.default(4096),
    routing: z.enum(['round_robin', 'consistent_hash']).default('consistent_hash'),
    request_timeout_s: z.number().positive().default(120),
    health_interval_s: z.number().positive().default(5),
    startup_timeout_s: z.number().positive().default(600),
    extra_args: z.array(z.string()).default([]),
  })
  .prefault({});

export const DatasetConfig = z
  .strictObject({
    kind: z.enum(['synthetic', 'geo3k_dir', 'jsonl', 'parquet']).default('synthetic'),
    /** For geo3k_dir: the folder (with test.jsonl, train_sample.jsonl, images/). Else a file. */
    path: z.string().default(''),
    train_split: z.string().default('train'),
    eval_split: z.string().default('test'),
    synthetic_size: positiveInt.default(64),
    synthetic_seed: z.number().int().nonnegative().default(0),
    image_roots: z.array(z.string()).default([]),
    allow_hosts: z.array(z.string()).default([]),
    max_image_pixels: positiveInt.default(16_000_000),
    max_image_bytes: positiveInt.default(20 * 1024 * 1024),
    system_prompt: z.string().optional(),
  })
  .prefault({});

export const RolloutConfig = z
  .strictObject({
    multi_turn: z.boolean().default(true),
    max_turns: positiveInt.default(3),
    prompts_per_step: positiveInt.default(4),
    n_samples_per_prompt: positiveInt.default(4),
    max_response_len: positiveInt.default(256),
    max_context_len: positiveInt.default(4096),
    temperature: z.number().positive().default(1.0),
    top_p: z.number().gt(0).lte(1).default(1.0),
    concurrency: positiveInt.default(8),
    seed: z.number().int().nonnegative().default(0),
    reward_tolerance: z.number().nonnegative().default(0),
    truncate_status_when_out_of_turns: z.boolean().default(true),
    /** Sample only among these token ids (synthetic tasks; empty: the whole vocabulary). */
    allowed_token_ids: z.array(z.number().int().nonnegative()).default([]),
    /** math: the default math RM (binary). target_fraction: share of the response equal to the label (the learning test). */
    reward_fn: z.enum(['math', 'target_fraction']).default('math'),
  })
  .prefault({});

export const GrpoConfig = z
  .strictObject({
    lr: z.number().positive().default(1e-6),
    weight_decay: z.number().nonnegative().default(0),
    eps_clip: z.number().positive().default(0.2),
    eps_clip_high: z.number().positive().default(0.28),
    dr_grpo: z.boolean().default(false),
    kl: z
      .strictObject({
        enabled: z.boolean().default(false),
        coef: z.number().nonnegative().default(0),
        type: z.enum(['k1', 'k2', 'low_var_kl']).default('low_var_kl'),
      })
      .prefault({}),
    entropy_coef: z.number().nonnegative().default(0),
    tis: z
      .strictObject({
        enabled: z.boolean().default(false),
        clip: z.number().positive().default(2.0),
      })
      .prefault({}),
    loss_agg: z.enum(['sample_mean', 'token_mean']).default('sample_mean'),
    micro_batch_tokens: positiveInt.default(8192),
    grad_clip: z.number().positive().default(1.0),
    zero_std_filter: z.boolean().default(false),
  })
  .prefault({});

export const RunConfig = z
  .strictObject({
    steps: positiveInt.default(3),
    /** Every step commits a checkpoint (exactly-once needs it); pruning older ones every k steps is not built yet. */
    checkpoint_interval: positiveInt.default(1),
    eval_interval: z.number().int().nonnegative().default(0),
    eval_prompts: z.number().int().nonnegative().default(8),
    steps_per_workflow_run: positiveInt.default(1),
  })
  .prefault({});

export const TempoConfig = z.strictObject({
  state_dir: z.string().default(''),
  temporal: TemporalConfig,
  server: ServerConfig,
  model: ModelConfig,
  engines: EnginesConfig,
  dataset: DatasetConfig,
  rollout: RolloutConfig,
  grpo: GrpoConfig,
  run: RunConfig,
  log_level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
});

export type TempoConfig = z.infer<typeof TempoConfig>;
export type RolloutConfig = z.infer<typeof RolloutConfig>;
export type GrpoConfig = z.infer<typeof GrpoConfig>;
export type DatasetConfig = z.infer<typeof DatasetConfig>;
export type EnginesConfig = z.infer<typeof EnginesConfig>;

/** Keys whose values never appear in printed config. */
export const SECRET_KEYS = new Set(['api_key']);
