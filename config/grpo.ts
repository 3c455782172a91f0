// The grpo section of the config tree and the other keys the trainer receives as its hyper-parameters
// (lib/contract.ts TrainHyper is picked from these: one declaration of each field and its default).
// zod only: the workflow bundle imports the wire contract.
import { z } from 'zod';
import { batch, positiveInt, tokens } from './bounds.js';

/** The fields of `grpo`. Those in TRAIN_HYPER_KEYS go to the trainer; the others steer the workflow. */
export const GrpoFields = z.strictObject({
  lr: z.number().positive().default(1e-6),
  /** Linear warm-up: step k < lr_warmup_steps trains at lr·(k+1)/(lr_warmup_steps+1). A fresh Adam's
   *  first steps move every parameter about a full lr (docs/tasks.md: that broke the tiny policy's
   *  tool-call format at 2e-3); verl's actor has the same knob (lr_warmup_steps). */
  lr_warmup_steps: z.number().int().nonnegative().default(0),
  /** After the warm-up: constant, or cosine from lr down to a tenth of it at the last step. */
  lr_schedule: z.enum(['constant', 'cosine', 'wsd']).default('constant'),
  weight_decay: z.number().nonnegative().default(0),
  /** AdamW's epsilon. Larger values damp the update of parameters whose gradients are tiny (Adam
   *  otherwise moves them a full lr step): on the tiny demo model 1e-8 let one GRPO step break the
   *  near-certain tool-call tokens (docs/tasks.md). */
  adam_eps: z.number().positive().max(1).default(1e-8),
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
      /** At least 1 (below, truncate caps every weight under 1 and mask's band is empty); above 1 with
       *  mask (at 1 its band keeps only ratios of exactly 1: almost no token trains). The same bounds
       *  in workers/trainer/contract.py TisConfig. */
      clip: z
        .number()
        .min(1, {
          error:
            'at least 1: truncate caps every weight at clip (below 1, every weight is cut under 1) and mask keeps [1/clip, clip] (below 1, an empty band: no token trains)',
        })
        .default(2.0),
      /** truncate: each token's weight is min(π_old / π_rollout, clip). mask: 1 inside
       *  [1/clip, clip], 0 outside (the token does not train). */
      mode: z.enum(['truncate', 'mask']).default('truncate'),
    })
    .refine((t) => t.mode !== 'mask' || t.clip > 1, {
      path: ['clip'],
      message:
        'must be above 1 with grpo.tis.mode mask: the band [1/clip, clip] of clip 1 keeps only tokens whose ratio is exactly 1 (almost none train)',
    })
    .prefault({}),
  loss_agg: z.enum(['sample_mean', 'token_mean']).default('sample_mean'),
  /** Tokens per micro-batch, the trainer's memory knob. On a GPU, packed: samples end to end in one row
   *  (first-fit decreasing), each attending only to itself; on a CPU, padded: consecutive samples while
   *  count × longest fits. A longer sample goes alone. */
  micro_batch_tokens: tokens().default(8192),
  grad_clip: z.number().positive().default(1.0),
  /** Optimizer updates per step, as verl's ppo_mini_batch_size / ppo_epochs: the step's samples in k
   *  consecutive mini-batches (groups stay whole when the sizes divide), each one update, ppo_epochs
   *  passes. Beyond the first update the PPO clip works: ratios are taken against the logprobs of the
   *  weights that sampled. 1 and 1: one on-policy update. */
  ppo_mini_batches: batch().default(1),
  ppo_epochs: positiveInt.default(1),
  /** The workflow leaves out of the train step every group whose rewards are all equal (its
   *  advantages are all 0); the samples left out are counted in rollout/zero_std_dropped. */
  zero_std_filter: z.boolean().default(false),
  /** The step's mean |trainer − engine| logprob of the sampled tokens (train/train_rollout_logprob_abs_diff)
   *  above which the run warns that engine and trainer disagree (a compiled or quantised engine drifting,
   *  a wrong dtype or chat template): train/logprob_diff_alarm 1 in the step's metrics, a warning in the
   *  run's log, on the train command's step line and in `tempo-rl status`. In bf16 a healthy engine is
   *  0.002–0.025 (docs/engines.md "CUDA graphs"); with rollout.max_staleness > 0 the value also holds the
   *  policy's own change. 0: off. */
  max_logprob_diff: z.number().nonnegative().default(0.05),
});

/** The upper clip bound is checked against the lower one in the config and on the wire. */
export const epsClipOrdered: [
  (g: { eps_clip: number; eps_clip_high: number }) => boolean,
  { path: string[]; message: string },
] = [
  (g) => g.eps_clip_high >= g.eps_clip,
  { path: ['eps_clip_high'], message: 'must be at least grpo.eps_clip (the upper clip bound)' },
];

export const GrpoConfig = GrpoFields.refine(...epsClipOrdered).prefault({});

/** The keys of `grpo` the trainer receives (lr_warmup_steps, lr_schedule, zero_std_filter and max_logprob_diff are the workflow's). */
export const TRAIN_HYPER_KEYS = {
  lr: true,
  weight_decay: true,
  adam_eps: true,
  eps_clip: true,
  eps_clip_high: true,
  dr_grpo: true,
  kl: true,
  entropy_coef: true,
  tis: true,
  loss_agg: true,
  micro_batch_tokens: true,
  grad_clip: true,
  ppo_mini_batches: true,
  ppo_epochs: true,
} as const;

/** rollout.temperature: the engines sample at it and the trainer scales its logits by it. */
export const samplingTemperature = z.number().positive().default(1.0);
/** model.dtype (documented at the key): the engines serve it and the trainer computes in it. */
export const modelDtype = z
  .enum(['float32', 'bfloat16'], {
    error: 'float32 or bfloat16 (float16 would need loss scaling, which the trainer does not do)',
  })
  .default('float32');
/** rollout.routing_replay (documented at the key). */
export const routingReplay = z.boolean().default(false);
