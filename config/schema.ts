// The one config tree of tempo-rl. Every key is snake_case (the same names in YAML, in the
// TEMPO_RL__* environment variables and in the Python trainer's contract). Objects are strict: an
// unknown key is an error, never ignored.
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { SYNTHETIC_TASKS, strataRefusal } from '../lib/data/rows.js';
import { DEFAULT_ENVIRONMENT, environmentNames, getEnvironment } from '../lib/env/registry.js';
import { REWARD_MATCHES } from '../lib/math/options.js';
import { BlobStoreUri } from '../stores/blobstore.js';
import { parseUserPath, virtualFilesystemOf } from '../base/out-path.js';
import { engineArgProblems } from './engine-args.js';
import { isMoeModel } from './model-dir.js';
import {
  atMost,
  batch,
  MAX_BATCH,
  MAX_ENGINES,
  MAX_GPUS,
  MAX_IMAGE_BYTES,
  MAX_IMAGE_PIXELS,
  MAX_SYNTHETIC_ROWS,
  positiveInt,
  seconds,
  tokens,
} from './bounds.js';
import { GrpoConfig, modelDtype, routingReplay, samplingTemperature } from './grpo.js';
import { OpenEnvConfig, openEnvIssues } from './openenv.js';

export {
  MAX_BATCH,
  MAX_ENGINES,
  MAX_GPUS,
  MAX_IMAGE_BYTES,
  MAX_IMAGE_PIXELS,
  MAX_SYNTHETIC_ROWS,
  MAX_TIMER_S,
  MAX_TOKENS,
} from './bounds.js';
export { GrpoConfig } from './grpo.js';

const port = z.number().int().min(1).max(65535);

/** A local path as given (base/out-path.ts parseUserPath: `~/` expanded; blank, padded or control
 *  characters refused). Empty: the key's default. */
const localPath = () =>
  z.string().transform((p, ctx) => {
    if (p === '') return p;
    const r = parseUserPath(p);
    if ('problem' in r) {
      ctx.addIssue({ code: 'custom', message: r.problem });
      return z.NEVER;
    }
    return r.path;
  });

/** A turn is a generate call: more than this is a typo, not a task. */
export const MAX_TURNS = 64;
export const MAX_STEPS_PER_WORKFLOW_RUN = 5;

/** The task queues' names before the stack's suffix (temporal.task_queues). */
export const TASK_QUEUE_BASES = { rollout: 'rollout', trainer: 'trainer', environments: 'environments' } as const;
export type TaskQueueKind = keyof typeof TASK_QUEUE_BASES;

/** The default name of a stack's task queue: the base name and a short stable hash of its resolved
 *  state directory (the directory that holds its blob store and runs). */
/** A short stable id of the stack of a (resolved) state directory. */
export function stackId(stateDir: string): string {
  return createHash('sha256').update(stateDir).digest('hex').slice(0, 8);
}

export function stackTaskQueue(kind: TaskQueueKind, stateDir: string): string {
  return `${TASK_QUEUE_BASES[kind]}-${stackId(stateDir)}`;
}

const taskQueueName = z
  .string()
  .refine(
    (q) => q.trim() === q,
    "must not start or end with whitespace (leave it empty for a name of this stack's own)",
  )
  .default('');

export const TemporalConfig = z
  .strictObject({
    /** host:port of the frontend. Empty: the embedded dev server of `tempo-rl server`. */
    address: z.string().default(''),
    namespace: z.string().min(1).default('default'),
    api_key: z.string().default(''),
    tls: z
      .strictObject({
        enabled: z.boolean().default(false),
        client_cert_path: localPath().default(''),
        client_key_path: localPath().default(''),
        server_ca_cert_path: localPath().default(''),
        /** PEM text given inline (a Temporal config profile's *_data, TEMPORAL_TLS_*_DATA) instead of a path. */
        client_cert_data: z.string().default(''),
        client_key_data: z.string().default(''),
        server_ca_cert_data: z.string().default(''),
        server_name: z.string().default(''),
      })
      .superRefine((tls, ctx) => {
        for (const key of ['client_cert', 'client_key', 'server_ca_cert'] as const)
          if (tls[`${key}_path`] && tls[`${key}_data`])
            ctx.addIssue({
              code: 'custom',
              path: [`${key}_data`],
              message: `give ${key}_path or ${key}_data, not both`,
            });
      })
      .prefault({}),
    /** Empty (the default): a name of this stack's own, `rollout-<hash of the state dir>` (see
     *  stackTaskQueue), so that workers of another stack on the same server and namespace never take its
     *  tasks. A name given here is used as it is: stacks that share it share their tasks. */
    task_queues: z
      .strictObject({
        rollout: taskQueueName,
        trainer: taskQueueName,
        /** The Python environment worker's (python_env). */
        environments: taskQueueName,
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
  .refine((s) => s.port !== s.ui_port, {
    path: ['ui_port'],
    message: 'must differ from server.port (both the frontend and the UI bind a port)',
  })
  .prefault({});

export const ModelConfig = z
  .strictObject({
    /** A local checkpoint directory or a Hugging Face id. Empty: the generated tiny model. */
    path: localPath().default(''),
    tiny_seed: z.number().int().nonnegative().default(0),
    /** The engines serve this dtype and the trainer computes in it, so logprobs match. bfloat16: the
     *  trainer's forward runs under bf16 autocast over fp32 master weights and fp32 AdamW state, so
     *  small updates are not rounded away. */
    dtype: modelDtype,
    /** 0: CPU; 1: one GPU; N > 1: the trainer trains data-parallel on N GPUs of this node (torchrun,
     *  FSDP2; workers/trainer/worker/data_parallel.py), and needs run.trainer_standbys 0. */
    num_gpus: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_GPUS, { error: `at most ${MAX_GPUS}: the GPUs of one node, a trainer process each` })
      .default(0),
    /** tool_transcripts: train the generated tiny model's warm start (client/warm-start.ts: SFT on calc_score transcripts of the run's task), built on first use and cached. */
    warm_start: z.enum(['none', 'tool_transcripts']).default('none'),
  })
  .refine((m) => m.warm_start === 'none' || m.path === '', {
    path: ['warm_start'],
    error: (iss) =>
      `tool_transcripts warm-starts the generated tiny model, so model.path must be empty, not ${JSON.stringify((iss.input as { path: string }).path)} (model.warm_start=none trains model.path as it is)`,
  })
  .prefault({});

/** How colocated engines sleep when engines.sleep_level is not given. */
export const DEFAULT_SLEEP_LEVEL = 2;

export const EnginesConfig = z
  .strictObject({
    /** External engines (OpenAI-compatible vLLM servers). When set, nothing is started. */
    urls: z.array(z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' })).default([]),
    count: atMost(MAX_ENGINES, 'engines, each a process (and a model in memory) of its own').default(1),
    base_port: port.default(8100),
    max_model_len: tokens().default(4096),
    /** Which engine a generate request goes to (docs/engines.md "Routing"): round_robin; consistent_hash
     *  on the episode id (every turn of an episode on one engine); cache_aware on the request's tokens:
     *  the engine that was sent the longest prefix of them (an episode's earlier turns, its GRPO group's
     *  prompt) unless it runs more than balance_threshold requests above the least-loaded engine.
     *  cache_aware: the best prefix-cache hit rate measured (bench/engine.ts), no slower. */
    routing: z.enum(['round_robin', 'consistent_hash', 'cache_aware']).default('cache_aware'),
    /** cache_aware: in-flight requests by which the engine holding a prefix may exceed the least-loaded
     *  one. Larger keeps more GRPO groups on one engine (more hits) but can leave an engine idle when
     *  few episodes are in flight (measured in docs/engines.md). */
    balance_threshold: z.number().int().nonnegative().default(4),
    /** Per HTTP request. A generate request is also cut off before its activity's start-to-close timeout (activities/generate.ts). */
    request_timeout_s: seconds().positive().default(120),
    health_interval_s: seconds().positive().default(5),
    startup_timeout_s: seconds().positive().default(600),
    extra_args: z.array(z.string()).default([]),
    /** GPU engines: run the model compiled with CUDA graphs (vLLM's default) or eagerly (--enforce-eager).
     *  auto: CUDA graphs where the installed vLLM release is measured to keep the trainer's logprobs for
     *  the model's family (workers/tempo_engine/compat.py GRAPH_PARITY, docs/engines.md "CUDA graphs"),
     *  eager elsewhere and with run.deterministic. CPU engines always run eagerly. */
    cuda_graphs: z.union([z.literal('auto'), z.boolean()]).default('auto'),
    /** GPU engines only: the share of each GPU's memory an engine takes (vLLM's --gpu-memory-utilization;
     *  its weights, activations and KV cache). Absent: vLLM's default (0.9). Colocated with the trainer,
     *  the rest is the trainer's (docs/engines.md "Colocation"). */
    gpu_memory_utilization: z.number().gt(0).lte(1).optional(),
    /** The engines share the trainer's GPUs (engine i on the GPUs of trainer rank i): they sleep while
     *  the trainer trains and wake for the weight sync and the next rollout. Needs GPUs, the ipc
     *  transport and a synchronous run. */
    colocate: z.boolean().default(false),
    /** How colocated engines sleep: 1 keeps their weights in host memory, 2 drops them (the ipc sync
     *  rewrites every weight at each wake anyway, so 2 saves two copies of the weights a step).
     *  Absent: DEFAULT_SLEEP_LEVEL; given, it needs engines.colocate (only colocated engines sleep). */
    sleep_level: z
      .union([z.literal(1), z.literal(2)], {
        error: 'must be 1 (weights kept in host memory) or 2 (weights dropped; the default)',
      })
      .optional(),
    /** How new weights reach the engines: disk (they reload the checkpoint's model directory, or pull it
     *  from an s3:// blob store), ipc (the trainer's memory, through CUDA IPC on the GPUs it shares with
     *  them or /dev/shm on CPU: engines on its host), auto (ipc when colocated, else disk). nccl
     *  (engines on other GPUs) is refused until it can be tested (it needs two GPUs). */
    weight_transport: z.enum(['auto', 'disk', 'ipc', 'nccl']).default('auto'),
    /** ipc: the size of each bucket of weights (two are in use at a time on the trainer's GPU). */
    ipc_bucket_mb: atMost(65536, "MiB a bucket (two are held on the trainer's GPU at once)").default(1024),
    /** ipc: how an engine takes the weights. auto: copied in place into its parameters where they are
     *  loaded as the checkpoint holds them (a GPU, unquantized, no fused experts: 0.032–0.034 s/GB on
     *  the 2B shape on an H100), vLLM's layer-wise reload elsewhere; layerwise: the layer-wise reload
     *  always (0.070–0.074 s/GB there). docs/engines.md "Weights". */
    ipc_load: z.enum(['auto', 'layerwise']).default('auto'),
  })
  .refine((e) => e.urls.length > 0 || e.base_port + e.count - 1 <= 65535, {
    path: ['base_port'],
    message: 'plus engines.count − 1 must be a port (at most 65535): engine i listens on base_port + i',
  })
  .prefault({});

export const DatasetConfig = z
  .strictObject({
    kind: z.enum(['synthetic', 'geo3k_dir', 'jsonl', 'parquet']).default('synthetic'),
    /** For geo3k_dir: the folder (with test.jsonl, train_sample.jsonl, images/). Else a file. */
    path: localPath().default(''),
    train_split: z.string().default('train'),
    eval_split: z.string().default('test'),
    synthetic_size: atMost(MAX_SYNTHETIC_ROWS, 'rows, each drawn, rendered to an image and stored at load').default(64),
    synthetic_seed: z.number().int().nonnegative().default(0),
    /** measure: lengths and areas to compute. angle_facts: angles fixed by the figure's kind (the demo's
     *  learnable task, docs/tasks.md); both for geo3k. arithmetic: multi-step expressions, text only, for
     *  the arithmetic environment. Absent: the first task of rollout.environment (docs/environments.md). */
    synthetic_task: z.enum(SYNTHETIC_TASKS).optional(),
    image_roots: z.array(localPath()).default([]),
    allow_hosts: z.array(z.string()).default([]),
    max_image_pixels: atMost(MAX_IMAGE_PIXELS, "pixels (16383 × 16383, the image decoder's own limit)").default(
      16_000_000,
    ),
    max_image_bytes: atMost(
      MAX_IMAGE_BYTES,
      'bytes (1 GiB): an image is held in memory whole, several at a time',
    ).default(20 * 1024 * 1024),
    system_prompt: z.string().optional(),
  })
  .prefault({});

export const MAX_ROLLOUT_WORKER_PROCESSES = 64;
/** Cores per rollout worker process under `worker_processes: auto`. One process saturates at about
 *  1.3 cores (its main thread, its workflow thread), and the Temporal server spends about as much CPU
 *  per task as the workers do, so a process per 4 cores leaves the server, the engines' API servers
 *  and the trainer their share (docs/benchmarks.md "512 episodes in flight"). */
export const CORES_PER_ROLLOUT_WORKER = 4;
export const MAX_AUTO_ROLLOUT_WORKERS = 8;

/** The rollout worker processes a stack starts: the key's number, or for `auto` one per
 *  CORES_PER_ROLLOUT_WORKER cores of this host (at least 1, at most MAX_AUTO_ROLLOUT_WORKERS). */
export function rolloutWorkerProcesses(
  rollout: { worker_processes: 'auto' | number },
  cores = os.availableParallelism(),
): number {
  if (rollout.worker_processes !== 'auto') return rollout.worker_processes;
  return Math.max(1, Math.min(MAX_AUTO_ROLLOUT_WORKERS, Math.floor(cores / CORES_PER_ROLLOUT_WORKER)));
}

export const RolloutConfig = z
  .strictObject({
    /** The registered environment episodes run in (lib/env/registry.ts): its rows, prompt, tools, stop strings, steps and grade. */
    environment: z
      .string()
      .refine((name) => environmentNames().includes(name), {
        error: (issue) =>
          `unknown environment ${JSON.stringify(issue.input)} (known: ${environmentNames().join(', ')})`,
      })
      .default(DEFAULT_ENVIRONMENT),
    multi_turn: z.boolean().default(true),
    max_turns: positiveInt.max(MAX_TURNS, `at most ${MAX_TURNS} turns`).default(3),
    prompts_per_step: batch().default(4),
    /** GRPO's advantage is relative to the group: a group of one has advantage 0 and trains on nothing. */
    n_samples_per_prompt: batch()
      .min(2, 'at least 2 (GRPO normalises rewards within a group; with 1 every advantage is 0)')
      .default(4),
    max_response_len: tokens().default(256),
    max_context_len: tokens().default(4096),
    temperature: samplingTemperature,
    concurrency: batch().default(8),
    /** Rollout worker processes the stack runs (each with its own event loop for workflow tasks and
     *  activities, all on the stack's rollout queue); auto: rolloutWorkerProcesses below. */
    worker_processes: z
      .union([z.literal('auto'), positiveInt.max(MAX_ROLLOUT_WORKER_PROCESSES)], {
        error: `expected auto or a whole number of processes from 1 to ${MAX_ROLLOUT_WORKER_PROCESSES} (each a Node process)`,
      })
      .default('auto'),
    seed: z.number().int().nonnegative().default(0),
    /** The order prompts are drawn in, a new one each epoch from rollout.seed. shuffle: the train rows
     *  shuffled. stratified: each stratum's rows dealt in turn, so every step draws each stratum
     *  (angle_facts: each figure kind) about equally; only for datasets whose rows declare strata. */
    prompt_order: z.enum(['shuffle', 'stratified']).default('shuffle'),
    /** exact (vime's math RM): equal values only; rounded: also a decimal that rounds the other side (docs/reward.md). */
    reward_match: z.enum(REWARD_MATCHES).default('exact'),
    /** Absolute: also accept |answer − label| ≤ this (vime's Geo3K RM); 0: off. */
    reward_tolerance: z.number().nonnegative().default(0),
    truncate_status_when_out_of_turns: z.boolean().default(true),
    /** The async window: episodes sampled by weights up to k versions older than those being trained
     *  go into a step; the next steps' episodes run while the trainer trains (docs/ARCHITECTURE.md
     *  "Async window"). 0: synchronous (every episode of a step is sampled by the weights it trains). */
    max_staleness: z
      .number()
      .int()
      .nonnegative()
      .max(8, 'at most 8 (each version of staleness keeps one more step of episodes in flight)')
      .default(0),
    /** What a weight sync does with generate requests in flight (with max_staleness > 0 some are):
     *  keep them (vLLM's pause keep: they go on under the new weights, each token's logprob from the
     *  weights that sampled it), abort them (the turn is generated again under the new weights), or
     *  wait for them to finish before loading. */
    sync_in_flight: z.enum(['keep', 'abort', 'wait']).default('keep'),
    /** Rollout routing replay (R3) for an MoE model: the engines return each token's routed experts
     *  (started with --enable-return-routed-experts) and the trainer's forward routes every token to
     *  the engine's experts, their weights recomputed from its own router (workers/trainer/model/routing_replay.py).
     *  Needs an MoE model.path (`tempo-rl model tiny --moe`); vLLM 0.32 returns routing only through
     *  its Model Runner V2, which on CPU needs triton-cpu (docs/engines.md "Routed experts"). */
    routing_replay: routingReplay,
  })
  .refine((r) => r.max_response_len <= r.max_context_len, {
    path: ['max_response_len'],
    message: 'must be at most rollout.max_context_len (the response is part of the context)',
  })
  .prefault({});

/** algorithm sft: supervised fine-tuning on transcripts, through the same steps, checkpoints and audit as GRPO. */
export const SftConfig = z
  .strictObject({
    /** JSONL of SFT records {id, messages, images?, tools?}: what `data sft-export` and `data sft-transcripts` write. */
    path: localPath().default(''),
    /** Records per step (one optimizer step each). */
    batch_size: batch().default(16),
    lr: z.number().positive().default(1e-5),
    /** constant, or cosine from sft.lr down to a tenth of it over run.steps (a constant high rate plateaus). */
    lr_schedule: z.enum(['constant', 'cosine', 'wsd']).default('constant'),
    /** Render the next step's records while a step trains (measured on 2 shared cores, 24 steps of the
     *  demo's warm start: 112 s against 118–122 s without; docs/tasks.md). */
    render_ahead: z.boolean().default(true),
  })
  .prefault({});

export const RunConfig = z
  .strictObject({
    steps: positiveInt.default(3),
    /** The same run bit for bit, killed or not (docs/certification.md): engines that tempo-rl starts
     *  batch one sequence at a time without prefix caching, the trainer runs deterministic algorithms
     *  from a seeded step, and the async window samples step s from exactly the weights of step s − k. */
    deterministic: z.boolean().default(false),
    /** Also evaluate the starting weights before step 0 (needs eval_interval > 0): the "before" of a run. */
    eval_at_start: z.boolean().default(false),
    /** Keep the weights of the newest k full checkpoints only (k ≥ 2; meta.json of every step stays for the audit). 0: keep all. */
    keep_checkpoints: z
      .number()
      .int()
      .nonnegative()
      .refine((k) => k !== 1, 'must be 0 (keep all) or at least 2 (a retried step reloads the one before the newest)')
      .default(0),
    /** With keep_checkpoints: also keep the full checkpoints of steps N with (N + 1) a multiple of this. 0: none. */
    keep_checkpoint_every: z.number().int().nonnegative().default(0),
    /** Weights and optimizer state every k steps (and at the last step); the steps between commit a
     *  small record and are replayed from it after a crash (docs/ARCHITECTURE.md). 1: every step. */
    checkpoint_interval: positiveInt.default(1),
    /** A step in which every episode failed is redone this many times (same prompts, new episodes),
     *  waiting empty_step_wait_s × the try between; then the run ends 'failed', nothing skipped. */
    empty_step_retries: z.number().int().nonnegative().default(3),
    /** Trainer processes a stack keeps warm beside the active one (imports done, polling nothing); one
     *  takes over the moment the active trainer dies (workers/trainer/worker/standby.py). 0: a dead trainer
     *  waits for its restart. */
    trainer_standbys: z.number().int().nonnegative().max(4).default(1),
    empty_step_wait_s: seconds().nonnegative().default(30),
    eval_interval: z.number().int().nonnegative().default(0),
    /** Held-out prompts per eval: the first ones of the eval split, at most all of it. */
    eval_prompts: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_BATCH, {
        error: `at most ${MAX_BATCH}: an eval holds its episodes in memory and in its workflow history at once`,
      })
      .default(8),
    /** The held-out eval's sampling temperature; 0 is greedy (verl's validation default). Absent: rollout.temperature. */
    eval_temperature: z.number().nonnegative().optional(),
    /** Also continued as new whenever Temporal suggests it; the bound keeps one run's history far from
     *  the 50k-event limit (a 2B-config step is ~5k events: 512 episodes + 256 eval). */
    steps_per_workflow_run: positiveInt
      .max(
        MAX_STEPS_PER_WORKFLOW_RUN,
        `at most ${MAX_STEPS_PER_WORKFLOW_RUN} (a step of hundreds of episodes adds thousands of history events; Temporal fails a run at 50k)`,
      )
      .default(1),
  })
  .refine((r) => r.eval_interval === 0 || r.eval_prompts > 0, {
    path: ['eval_prompts'],
    message: 'must be at least 1 when run.eval_interval is set (0 turns eval off)',
  })
  .prefault({});

/** The claim-check store of samples, prompts, datasets and images (docs/blobstore.md). Checkpoints
 *  and the weights the engines reload stay in the trainer's run directory whatever this says. */
export const BlobsConfig = z
  .strictObject({
    /** s3://bucket[/prefix], file:///abs/path or a path; empty: <state_dir>/blobs. */
    uri: z
      .string()
      .default('')
      .superRefine((uri, ctx) => {
        if (uri === '') return;
        const r = BlobStoreUri.safeParse(uri);
        if (!r.success)
          ctx.addIssue({
            code: 'custom',
            message: `bad blob store URI ${JSON.stringify(uri)}: ${r.error.issues.map((i) => i.message).join('; ')}`,
          });
      }),
  })
  .prefault({});

/** Where a stack keeps its state (runs, checkpoints, the default blob store): never on a virtual
 *  filesystem (a directory made there spins forever, base/out-path.ts). Empty: under XDG_STATE_HOME. */
const stateDir = localPath().superRefine((p, ctx) => {
  const virtual = p === '' ? null : virtualFilesystemOf(path.resolve(p));
  if (virtual)
    ctx.addIssue({
      code: 'custom',
      message: `${path.resolve(p)} is under ${virtual}, a virtual filesystem, not a place for files`,
    });
});

/** A Python environment (rollout.environment verifiers or openenv), served by the environment worker
 *  (workers/environments; docs/environments.md "Bring your own environment"). */
export const PythonEnvConfig = z
  .strictObject({
    /** The verifiers taskset id: an installed module that exports a v1 Taskset (and maybe its Env),
     *  e.g. tempo_rl_geo3k, tempo_rl_reasoning_gym, or a package installed into the worker's Python. */
    id: z.string().default(''),
    /** verifiers: the taskset's config fields (its own keys: the environment checks them). openenv: the
     *  reset's keyword arguments, beside the seed (the row's task index) and the episode id. */
    args: z.record(z.string(), z.unknown()).default({}),
    /** The verifiers harness that plays the agent: null is verifiers' plain chat loop. */
    harness: z.string().min(1).default('null'),
    /** Environment worker processes of the stack: more run more episodes at once. */
    workers: z.number().int().min(1).max(64, 'at most 64 processes').default(1),
    /** One attempt of an episode's environment: a hung one is cut here and retried (replaying the calls made). */
    episode_timeout_s: seconds().int().min(5, 'at least 5 s (a harness program starts in about a second)').default(600),
    /** Attempts of an episode's environment (a killed worker, a hang); then the episode is FAILED. */
    attempts: z.number().int().min(1).max(20).default(3),
    openenv: OpenEnvConfig,
  })
  .prefault({});

export const TempoConfig = z
  .strictObject({
    state_dir: stateDir.default(''),
    blobs: BlobsConfig,
    /** grpo: RL on episodes. sft: masked NLL on the transcripts of sft.path. One run machinery for both. */
    algorithm: z.enum(['grpo', 'sft']).default('grpo'),
    temporal: TemporalConfig,
    server: ServerConfig,
    model: ModelConfig,
    engines: EnginesConfig,
    dataset: DatasetConfig,
    rollout: RolloutConfig,
    grpo: GrpoConfig,
    sft: SftConfig,
    run: RunConfig,
    python_env: PythonEnvConfig,
    log_level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
  })
  .superRefine((c, ctx) => {
    const task = c.dataset.synthetic_task;
    const env = environmentNames().includes(c.rollout.environment) ? getEnvironment(c.rollout.environment) : null;
    if (env && task !== undefined && !env.syntheticTasks.includes(task))
      ctx.addIssue({
        code: 'custom',
        path: ['dataset', 'synthetic_task'],
        message: `makes rows that environment ${env.name} (rollout.environment) cannot take; its tasks: ${env.syntheticTasks.join(', ')}`,
      });
  })
  .superRefine((c, ctx) => {
    // An accepted key is honoured: a dataset without strata is refused here, not ordered as shuffle.
    // It orders GRPO's prompts; SFT's records (sft.path) keep the shuffle, as SFT's batch is
    // sft.batch_size, not rollout.prompts_per_step: the warm start's SFT config takes the demo's
    // rollout keys whole (client/warm-start.ts).
    if (c.rollout.prompt_order !== 'stratified' || c.algorithm === 'sft') return;
    const env = environmentNames().includes(c.rollout.environment) ? getEnvironment(c.rollout.environment) : null;
    const why = strataRefusal(c.dataset, c.dataset.synthetic_task ?? env?.syntheticTasks[0]);
    if (why) ctx.addIssue({ code: 'custom', path: ['rollout', 'prompt_order'], message: why });
  })
  .refine((c) => c.rollout.environment !== 'verifiers' || c.python_env.id !== '', {
    path: ['python_env', 'id'],
    message:
      'is required when rollout.environment is verifiers (the taskset id: an installed module exporting a verifiers v1 Taskset)',
  })
  .refine((c) => c.rollout.environment === 'verifiers' || c.python_env.id === '', {
    path: ['python_env', 'id'],
    message: 'names a Python environment, which runs only with rollout.environment verifiers (it would be ignored)',
  })
  .refine((c) => c.rollout.environment !== 'verifiers' || c.rollout.multi_turn, {
    path: ['rollout', 'multi_turn'],
    message:
      'must be true for the verifiers environment: its harness owns the turns (rollout.max_turns bounds its model calls)',
  })
  .superRefine((c, ctx) => {
    for (const issue of openEnvIssues(c.rollout, c.python_env)) ctx.addIssue({ code: 'custom', ...issue });
  })
  .refine((c) => c.model.warm_start === 'none' || c.rollout.environment === 'geo3k', {
    path: ['model', 'warm_start'],
    message:
      "tool_transcripts trains on calc_score transcripts, the geo3k environment's tool: it needs rollout.environment geo3k",
  })
  .refine((c) => c.algorithm !== 'sft' || c.sft.path !== '', {
    path: ['sft', 'path'],
    message: 'is required when algorithm is sft (a JSONL of SFT records: tempo-rl data sft-transcripts or sft-export)',
  })
  .refine((c) => c.rollout.max_staleness === 0 || c.algorithm === 'grpo', {
    path: ['rollout', 'max_staleness'],
    message: 'must be 0 with algorithm sft (SFT samples nothing from the engines)',
  })
  .refine((c) => c.rollout.max_staleness === 0 || c.grpo.tis.enabled, {
    path: ['grpo', 'tis', 'enabled'],
    message:
      'must be true when rollout.max_staleness > 0: episodes sampled by older weights are corrected by importance weights against their rollout logprobs',
  })
  .superRefine((c, ctx) => {
    for (const issue of weightTransportIssues(c)) ctx.addIssue({ code: 'custom', ...issue });
  })
  .superRefine((c, ctx) => {
    const why = cudaGraphsProblem(c);
    if (why) ctx.addIssue({ code: 'custom', path: ['engines', 'cuda_graphs'], message: why });
  })
  .superRefine((c, ctx) => {
    // engine flags read as vLLM reads them (config/engine-args.ts): --max_num_seqs is --max-num-seqs
    for (const p of engineArgProblems(c.engines.extra_args, c.run.deterministic))
      ctx.addIssue({ code: 'custom', path: ['engines', 'extra_args', p.index], message: p.message });
  })
  // vLLM 0.32 returns routed experts only from its Model Runner V2, which on CPU needs Triton's CPU
  // backend (not on PyPI): a CPU engine started for replay exits at start. Engines given by URL may be GPU ones.
  .refine((c) => !c.rollout.routing_replay || c.model.num_gpus > 0 || c.engines.urls.length > 0, {
    path: ['rollout', 'routing_replay'],
    message:
      'needs GPU engines (model.num_gpus > 0) or engines.urls: vLLM 0.32 on CPU cannot return routed experts (its Model Runner V2 requires Triton; docs/engines.md "Routed experts")',
  })
  .superRefine((c, ctx) => {
    const dense = c.rollout.routing_replay ? denseModel(c.model.path) : null;
    if (dense)
      ctx.addIssue({
        code: 'custom',
        path: ['rollout', 'routing_replay'],
        message: `needs a mixture-of-experts model, and ${dense}`,
      });
  });

/** Why engines.cuda_graphs cannot be honoured as set, or null. */
function cudaGraphsProblem(c: {
  model: { num_gpus: number };
  engines: { urls: string[]; cuda_graphs: 'auto' | boolean };
  run: { deterministic: boolean };
}): string | null {
  const g = c.engines.cuda_graphs;
  if (g === 'auto') return null;
  if (c.engines.urls.length > 0)
    return `is ${g}, but tempo-rl starts no engine when engines.urls is set (start those engines with or without --enforce-eager yourself)`;
  if (g && c.model.num_gpus === 0)
    return 'is true, but CPU engines (model.num_gpus 0) run eagerly: CUDA graphs need GPU engines';
  if (g && c.run.deterministic)
    return "is true with run.deterministic: the certified GPU mode (vLLM's batch-invariant kernels) is measured eager only; leave it auto";
  return null;
}

/** Why the model is known to be dense, or null: the generated tiny model (model.path empty) is; a local
 *  directory is if its config.json names no experts. A Hugging Face id cannot be told offline: the
 *  trainer refuses it at load if it has no experts. */
function denseModel(modelPath: string): string | null {
  if (modelPath === '')
    return 'the default model (model.path empty: the generated tiny model) is dense; make an MoE one with `tempo-rl model tiny --moe` and give its folder';
  return isMoeModel(modelPath) === false
    ? `model.path ${modelPath} is a dense model (its config.json names no experts)`
    : null;
}

type ConfigShape = {
  algorithm: string;
  model: { num_gpus: number };
  engines: {
    urls: string[];
    colocate: boolean;
    weight_transport: string;
    gpu_memory_utilization?: number | undefined;
    sleep_level?: 1 | 2 | undefined;
  };
  rollout: { max_staleness: number };
};

/** Where the engines are and how weights reach them, checked together (docs/engines.md "Weights"). */
function weightTransportIssues(c: ConfigShape): Array<{ path: string[]; message: string }> {
  const e = c.engines;
  const issues: Array<{ path: string[]; message: string }> = [];
  if (e.weight_transport === 'nccl')
    issues.push({
      path: ['engines', 'weight_transport'],
      message:
        "nccl (engines on other GPUs than the trainer's) is not built yet: it can only be tested with two GPUs; use disk, or colocate the engines (ipc)",
    });
  if (e.gpu_memory_utilization !== undefined && c.model.num_gpus === 0)
    issues.push({
      path: ['engines', 'gpu_memory_utilization'],
      message:
        'is for GPU engines: with model.num_gpus 0 the engines run on CPU (their KV cache is VLLM_CPU_KVCACHE_SPACE)',
    });
  if (e.sleep_level !== undefined && !e.colocate)
    issues.push({
      path: ['engines', 'sleep_level'],
      message: 'is for colocated engines (engines.colocate: true): only they sleep while the trainer trains',
    });
  if (e.colocate) {
    if (c.model.num_gpus === 0)
      issues.push({
        path: ['engines', 'colocate'],
        message: "needs GPUs (model.num_gpus > 0): engines sleep through vLLM's CUDA memory pool",
      });
    if (e.urls.length > 0)
      issues.push({
        path: ['engines', 'colocate'],
        message: "is for the engines tempo-rl starts on the trainer's GPUs, not engines.urls",
      });
    if (c.rollout.max_staleness > 0)
      issues.push({
        path: ['engines', 'colocate'],
        message:
          'needs rollout.max_staleness 0: the async window generates while the trainer trains, when colocated engines sleep',
      });
    if (c.algorithm !== 'grpo')
      issues.push({ path: ['engines', 'colocate'], message: 'is for algorithm grpo (SFT renders while it trains)' });
    if (e.weight_transport === 'disk')
      issues.push({
        path: ['engines', 'weight_transport'],
        message:
          'must be ipc (or auto) with engines.colocate: the engines wake with their weights dropped (engines.sleep_level 2)',
      });
  }
  if (e.weight_transport === 'ipc') {
    if (e.urls.length > 0)
      issues.push({
        path: ['engines', 'weight_transport'],
        message: "ipc needs the engines tempo-rl starts on the trainer's host, not engines.urls (use disk)",
      });
    if (c.model.num_gpus > 0 && !e.colocate)
      issues.push({
        path: ['engines', 'weight_transport'],
        message:
          "ipc on GPUs needs the engines on the trainer's GPUs (engines.colocate: true); engines on other GPUs need nccl, which is not built yet (use disk)",
      });
  }
  return issues;
}

/** The transport a run's weight syncs use (engines.weight_transport, with auto resolved). */
export function weightTransport(cfg: Pick<TempoConfig, 'engines'>): 'disk' | 'ipc' {
  const t = cfg.engines.weight_transport;
  if (t === 'auto') return cfg.engines.colocate ? 'ipc' : 'disk';
  if (t === 'nccl') throw new Error('engines.weight_transport nccl is not built');
  return t;
}

/** Whether the Temporal connection uses TLS: when temporal.tls.enabled, and also (as every Temporal
 *  SDK connects, and supervise/temporal.ts) when an API key or a client certificate is given, even with
 *  enabled false. `config check` notes the difference. */
export function tlsInUse(t: Pick<TempoConfig['temporal'], 'api_key' | 'tls'>): boolean {
  return t.tls.enabled || t.api_key !== '' || t.tls.client_cert_path !== '' || t.tls.client_cert_data !== '';
}

export type TempoConfig = z.infer<typeof TempoConfig>;
export type RolloutConfig = z.infer<typeof RolloutConfig>;
// biome-ignore lint/suspicious/noRedeclare: the grpo schema (re-exported) and its type share the name, as every section does
export type GrpoConfig = z.infer<typeof GrpoConfig>;
export type DatasetConfig = z.infer<typeof DatasetConfig>;
export type EnginesConfig = z.infer<typeof EnginesConfig>;

/** Keys that were once accepted, and why they are not now: an unknown-key error says so. */
export const REMOVED_KEYS: Readonly<Record<string, string>> = {
  'rollout.top_p':
    'removed: the engines always sample from the full distribution (top_p 1), which is the one the trainer scores (a top-p-renormalised logprob would bias TIS and the logprob diff)',
  'rollout.reward_fn':
    "removed: the reward is the environment's (rollout.environment; tune it with rollout.reward_match and rollout.reward_tolerance)",
};

/** Keys whose values never appear in printed config or in an error: the API key and the inline PEM
 *  (a private key; the certificates with it, which are long and not worth echoing either). */
export const SECRET_KEYS = new Set(['api_key', 'client_key_data', 'client_cert_data', 'server_ca_cert_data']);
