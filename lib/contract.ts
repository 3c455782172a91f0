// The TS side of the TS ↔ Python wire contract (snake_case JSON). The Python side is
// workers/trainer/contract.py; tests/ts/contract.test.ts checks both against the same payloads, and
// tests/python/test_contract_schema.py compares the trainer's inputs with it field by field.
import { z } from 'zod';
import {
  epsClipOrdered,
  GrpoFields,
  modelDtype,
  routingReplay,
  samplingTemperature,
  TRAIN_HYPER_KEYS,
} from '../config/grpo.js';

export const SampleRef = z.strictObject({
  ref: z.string(),
  reward: z.number(),
  group_id: z.string(),
});

/** The trainer's hyper-parameters: the grpo keys it uses (config/grpo.ts TRAIN_HYPER_KEYS) and three
 *  keys of other sections, each declared once there with its default. config/run-plan.ts sends every
 *  field; the trainer's defaults (workers/trainer/hyper_defaults.json) are TrainHyper.parse({}),
 *  written by `node --import tsx config/hyper-defaults.ts` and checked by tests/ts/contract.test.ts. */
export const TrainHyper = GrpoFields.pick(TRAIN_HYPER_KEYS)
  .extend({
    temperature: samplingTemperature,
    /** model.dtype: the trainer's compute precision; weights and optimizer state stay fp32. */
    compute_dtype: modelDtype,
    /** rollout.routing_replay, for GRPO: replay the engine's routed experts in the MoE policy's forward (R3). */
    routing_replay: routingReplay,
  })
  .refine(...epsClipOrdered);
export type TrainHyper = z.infer<typeof TrainHyper>;

export const DataCursor = z.strictObject({
  epoch: z.number().int().nonnegative(),
  cursor: z.number().int().nonnegative(),
});

/** What the workflow sends for a step: every field the trainer uses (its defaults in
 *  workers/trainer/contract.py serve its own tests and benches), but for sleep_engines and
 *  engine_sleep_level, which only colocated engines have. */
export const TrainStepInput = z.strictObject({
  run_id: z.string().min(1),
  step: z.number().int().nonnegative(),
  run_dir: z.string(),
  /** The store (a store URI: s3://…, file:///…) of the samples and images, and with an s3:// store of the
   *  checkpoints too (committed there; run_dir is then the trainer host's own scratch copy). */
  blob_store: z.string(),
  model_path: z.string(),
  samples: z.array(SampleRef),
  hyper: TrainHyper,
  data_cursor: DataCursor,
  /** sft: masked NLL on the samples' loss-mask tokens (rewards unused). */
  algorithm: z.enum(['grpo', 'sft']),
  /** run.keep_checkpoints: only the newest k full checkpoints keep their weights (0: all). */
  keep_checkpoints: z.number().int().nonnegative(),
  /** run.keep_checkpoint_every: also keep those of steps N with (N + 1) a multiple of it (0: none). */
  keep_checkpoint_every: z.number().int().nonnegative(),
  /** run.checkpoint_interval: a full checkpoint when (N + 1) is a multiple of it (1: every step). */
  checkpoint_interval: z.number().int().positive(),
  /** A full checkpoint at this step whatever the interval (the run's last step). */
  full_checkpoint: z.boolean(),
  /** engines.colocate: the engines on the trainer's GPUs, put to sleep (at engines.sleep_level) before it trains. */
  sleep_engines: z.array(z.string()).optional(),
  engine_sleep_level: z.union([z.literal(1), z.literal(2)]).optional(),
  /** run.deterministic: deterministic algorithms from a generator seeded by (seed, step). */
  deterministic: z.boolean(),
  /** rollout.seed, the run's seed. */
  seed: z.number().int(),
});
export type TrainStepInput = z.infer<typeof TrainStepInput>;

export const TrainStepOutput = z.object({
  step: z.number().int(),
  weight_version: z.number().int(),
  /** A directory in run_dir, or with an s3:// store the location <store>/named/runs/<run>/checkpoints/step-N. */
  checkpoint: z.string(),
  already_committed: z.boolean(),
  metrics: z.record(z.string(), z.number()),
});
export type TrainStepOutput = z.infer<typeof TrainStepOutput>;

/** What the workflow sends for a weight sync: every field (the trainer's defaults serve its own tests). */
export const SyncWeightsInput = z.strictObject({
  run_id: z.string(),
  weight_version: z.number().int().nonnegative(),
  checkpoint: z.string(),
  engines: z.array(z.string()),
  /** How /pause treats requests in flight: rollout.sync_in_flight in the async window; wait in a
   *  synchronous run (nothing is in flight, and the engines' image-feature cache is dropped too). */
  pause_mode: z.enum(['wait', 'abort', 'keep']),
  /** engines.weight_transport (auto resolved). */
  transport: z.enum(['disk', 'ipc']),
  /** engines.colocate: the engines slept while the trainer trained; the sync wakes them. */
  wake_engines: z.boolean(),
  /** ipc: the engines' dtype (model.dtype), engines.ipc_bucket_mb and engines.ipc_load. */
  engine_dtype: z.enum(['float32', 'bfloat16']),
  ipc_bucket_mb: z.number().int().positive(),
  ipc_load: z.enum(['auto', 'layerwise']),
});
export type SyncWeightsInput = z.infer<typeof SyncWeightsInput>;

export const SyncWeightsOutput = z.object({
  weight_version: z.number().int(),
  engines: z.array(z.object({ url: z.string(), ok: z.boolean(), seconds: z.number() })),
  /** Seconds of the sync's phases (wake_seconds, load_seconds, transfer_seconds, seconds in all) and,
   *  for ipc, transfer_bytes and buckets. Absent from workers before it. */
  timings: z.record(z.string(), z.number()).optional(),
});
export type SyncWeightsOutput = z.infer<typeof SyncWeightsOutput>;

/** One sample (docs/CONTRACTS.md "Sample"), written by the episode workflow's store step. */
export const Sample = z.strictObject({
  schema_version: z.literal(1),
  episode_id: z.string(),
  run_id: z.string(),
  step: z.number().int().nonnegative(),
  prompt_index: z.number().int().nonnegative(),
  sample_index: z.number().int().nonnegative(),
  group_id: z.string(),
  prompt_ids: z.array(z.number().int().nonnegative()),
  response_ids: z.array(z.number().int().nonnegative()),
  loss_mask: z.array(z.union([z.literal(0), z.literal(1)])),
  rollout_logprobs: z.array(z.number()),
  images: z.array(z.string()),
  reward: z.number(),
  status: z.enum(['COMPLETED', 'TRUNCATED', 'ABORTED', 'FAILED']),
  truncated_reason: z.string().nullable(),
  temperature: z.number(),
  label: z.string(),
  /** The environment the episode ran in (rollout.environment). Absent: samples stored before it was recorded (geo3k). */
  environment: z.string().optional(),
  turns: z.array(
    z.strictObject({
      engine: z.string(),
      weight_version: z.number().int().nullable(),
      generated_tokens: z.number().int().nonnegative(),
      observation_tokens: z.number().int().nonnegative(),
      finish_reason: z.string(),
      tool_answer: z.string().nullable().optional(),
      tool_score: z.number().nullable().optional(),
    }),
  ),
  routed_experts: z.array(z.string().nullable()).nullable(),
});
export type Sample = z.infer<typeof Sample>;
