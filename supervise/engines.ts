// The embedded vLLM engines: vLLM's OpenAI-compatible server (`python -m tempo_engine.main`) on loopback,
// recorded by pid in <state>/engines/engine-<i>.json and stopped only if still ours. External engines
// (engines.urls) are used as they are: nothing is started or stopped.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { engineFlagValue, findEngineFlags } from '../config/engine-args.js';
import { readJsonRecord } from '../base/bounded-file.js';
import type { TempoConfig } from '../config/schema.js';
import { childLogger } from '../base/log.js';
import { configuredBlobStoreUri } from '../lib/blob-store-config.js';
import { parseBlobStoreUri } from '../stores/blobstore.js';
import { pythonBin, REPO_ROOT, tinyModelDir } from '../base/paths.js';
import { stateLayout } from '../stores/layout.js';
import { commandLine, isAlive, portOpen, spawnDetached, stopProcess, waitFor } from './process.js';
import { VllmClient } from '../engine/client.js';
import { probeCapabilities } from '../engine/capabilities.js';
import type { EngineMetrics } from '../engine/types.js';

const log = childLogger('engines');
const HOST = '127.0.0.1';
// vLLM's server launched from a module that imports nothing itself: the engine core's spawned process
// re-imports the main module (workers/tempo_engine/main.py says why, docs/engines.md what it saves). It
// adapts this command line to the vLLM release installed (workers/tempo_engine/compat.py).
const ENGINE_MODULE = 'tempo_engine.main';
/** The engine entry point's own flag (compat.py takes it off the command line before vLLM parses it). */
const CUDA_GRAPHS_FLAG = '--tempo-rl-cuda-graphs';
export const SERVED_MODEL_NAME = 'tempo-rl';
const GiB = 1024 ** 3;

const EngineRecord = z.object({
  index: z.number().int().nonnegative(),
  pid: z.number().int().positive(),
  port: z.number().int().positive(),
  url: z.string(),
  model: z.string(),
  log: z.string(),
  started_at: z.string(),
});
export type EngineRecord = z.infer<typeof EngineRecord>;

export interface EngineStatus {
  url: string;
  external: boolean;
  pid: number | null;
  healthy: boolean;
  version: string | null;
  missing_routes: string[];
  metrics: EngineMetrics | null;
  log: string | null;
}

/** tempo-rl's vLLM worker extension: weights pulled from the blob store or handed over in buckets
 *  (workers/tempo_engine/extension.py). */
export const WORKER_EXTENSION = 'tempo_engine.extension.TempoRlWorker';

/** With a remote (s3://) blob store the engines share no filesystem with the trainer: they pull weights. */
export function pullsFromStore(cfg: TempoConfig): boolean {
  return parseBlobStoreUri(configuredBlobStoreUri(cfg)).kind !== 'local';
}

export function engineModel(cfg: TempoConfig): string {
  return cfg.model.path || tinyModelDir();
}

/** The command line of engine `index` (exported for tests and docs). */
export function engineArgs(cfg: TempoConfig, port: number, env: NodeJS.ProcessEnv = process.env): string[] {
  // On CPU the KV cache is preallocated host memory: keep it small (VLLM_CPU_KVCACHE_SPACE, in GiB, wins).
  const cpuKvCache =
    cfg.model.num_gpus === 0 && !env.VLLM_CPU_KVCACHE_SPACE
      ? ['--kv-cache-memory-bytes', String(cfg.model.path ? GiB : GiB / 4)]
      : [];
  return [
    '-m',
    ENGINE_MODULE,
    '--model',
    engineModel(cfg),
    '--served-model-name',
    SERVED_MODEL_NAME,
    '--host',
    HOST,
    '--port',
    String(port),
    '--dtype',
    cfg.model.dtype,
    '--max-model-len',
    String(cfg.engines.max_model_len),
    '--seed',
    String(cfg.rollout.seed),
    // the render and token-in/token-out routes
    '--enable-scale-out',
    // logprobs after temperature/top-p, which is what the trainer recomputes
    '--logprobs-mode',
    'processed_logprobs',
    // sampling defaults come from the request only, never from the checkpoint's generation_config
    '--generation-config',
    'vllm',
    // CPU engines run eagerly; a GPU engine's choice (engines.cuda_graphs) is made by its entry point,
    // which knows the vLLM release and the model's family (workers/tempo_engine/compat.py GRAPH_PARITY)
    ...executionArgs(cfg),
    // CPU engines default to 128-token blocks; smaller blocks let short multi-turn prompts hit the prefix cache
    ...(cfg.model.num_gpus === 0 ? ['--block-size', '32'] : []),
    // vllm-cpu crashes ("CPU Generator does not use offset") when a seeded request's prompt is split
    // across engine steps, and every tempo-rl request is seeded: seen at 128 concurrent 3-turn episodes
    // (bench/overhead.ts). Whole prompts per step avoid it.
    ...(cfg.model.num_gpus === 0 ? ['--no-enable-chunked-prefill'] : []),
    ...(inProcessCpuWorker(cfg) ? ['--distributed-executor-backend', 'uni'] : []),
    ...cpuKvCache,
    '--disable-uvicorn-access-log',
    // R3: every completion choice carries its tokens' routed experts (base64 .npy, docs/engines.md)
    ...(cfg.rollout.routing_replay ? ['--enable-return-routed-experts'] : []),
    // weights pulled from an s3:// store, or handed over in buckets (engines.weight_transport ipc)
    '--worker-extension-cls',
    WORKER_EXTENSION,
    ...gpuArgs(cfg),
    ...deterministicArgs(cfg),
    ...cfg.engines.extra_args,
  ];
}

/** CUDA graphs or eager: CPU engines are eager; GPU engines pass engines.cuda_graphs to compat.py
 *  (auto: its measured matrix decides; run.deterministic's batch-invariant mode is measured eager only). */
function executionArgs(cfg: TempoConfig): string[] {
  if (cfg.model.num_gpus === 0) return ['--enforce-eager'];
  const choice = cfg.run.deterministic ? false : cfg.engines.cuda_graphs;
  return [CUDA_GRAPHS_FLAG, choice === 'auto' ? 'auto' : choice ? 'on' : 'off'];
}

/** run.deterministic: a request's tokens must not depend on what else the engine holds. On CPU one
 *  sequence a batch (vllm-cpu has no batch-invariant kernels); on GPU vLLM's batch-invariant mode
 *  (engineEnv), in which the entry point picks FlexAttention and bounds the KV cache
 *  (workers/tempo_engine/deterministic.py). Both compute every prompt whole and afresh: a prefix-cache hit or a chunk boundary
 *  changes the order of the sums (docs/certification.md has the measured cost). */
function deterministicArgs(cfg: TempoConfig): string[] {
  if (!cfg.run.deterministic) return [];
  return cfg.model.num_gpus === 0
    ? ['--max-num-seqs', '1', '--no-enable-prefix-caching']
    : ['--no-enable-prefix-caching', '--no-enable-chunked-prefill'];
}

/** GPU engines: their memory share, and sleep mode when they share the trainer's GPUs. */
function gpuArgs(cfg: TempoConfig): string[] {
  if (cfg.model.num_gpus === 0) return [];
  const util = cfg.engines.gpu_memory_utilization;
  return [
    ...(util !== undefined ? ['--gpu-memory-utilization', String(util)] : []),
    ...(cfg.engines.colocate ? ['--enable-sleep-mode'] : []),
  ];
}

/** GPUs per engine: the product of the parallel sizes engines.extra_args choose (1 without). */
export function gpusPerEngine(cfg: TempoConfig): number {
  // as vLLM reads them: --tensor_parallel_size=2 is --tensor-parallel-size 2 (config/engine-args.ts)
  const size = (names: string[]) => Number(engineFlagValue(cfg.engines.extra_args, names)) || 1;
  return (
    size(['--tensor-parallel-size', '-tp']) *
    size(['--pipeline-parallel-size', '-pp']) *
    size(['--data-parallel-size', '-dp'])
  );
}

/** The GPUs engine `index` runs on, as indices into the GPUs this process sees: colocated, those of
 *  trainer rank `index` (round the trainer's GPUs when there are more engines); else the GPUs after the
 *  trainer's (model.num_gpus), engine after engine. Empty on CPU. */
export function engineGpus(cfg: TempoConfig, index: number): number[] {
  if (cfg.model.num_gpus === 0) return [];
  const per = gpusPerEngine(cfg);
  const first = cfg.engines.colocate ? (index * per) % cfg.model.num_gpus : cfg.model.num_gpus + index * per;
  return Array.from({ length: per }, (_, i) => first + i);
}

/** A CPU engine of one worker runs that worker inside its engine-core process (vLLM's `uni` executor;
 * on CPU it needs VLLM_ENABLE_V1_MULTIPROCESSING=0, else vLLM forces `mp`): one process fewer to spawn
 * and import torch and vLLM into (measured on 2 cores: engine start 91 s → 53 s). Left to the user when
 * extra_args choose a parallel layout or an executor. */
export function inProcessCpuWorker(cfg: TempoConfig): boolean {
  const parallel = [
    '--tensor-parallel-size',
    '-tp',
    '--pipeline-parallel-size',
    '-pp',
    '--distributed-executor-backend',
    '--data-parallel-size',
    '-dp',
  ];
  return cfg.model.num_gpus === 0 && findEngineFlags(cfg.engines.extra_args, parallel).length === 0;
}

/** CUDA_VISIBLE_DEVICES for GPUs given as indices into the GPUs this process sees (through its own
 *  CUDA_VISIBLE_DEVICES, when set). */
export function visibleDevices(gpus: number[], env: NodeJS.ProcessEnv = process.env): string {
  const seen = env.CUDA_VISIBLE_DEVICES?.split(',')
    .map((d) => d.trim())
    .filter(Boolean);
  if (!seen) return gpus.join(',');
  const missing = gpus.filter((g) => g >= seen.length);
  if (missing.length)
    throw new Error(
      `the engines need GPU ${Math.max(...missing)} but CUDA_VISIBLE_DEVICES=${env.CUDA_VISIBLE_DEVICES} shows ${seen.length} (model.num_gpus, engines.count, engines.colocate and the parallel sizes of engines.extra_args decide how many)`,
    );
  return gpus.map((g) => seen[g]!).join(',');
}

export function engineEnv(cfg: TempoConfig, env: NodeJS.ProcessEnv = process.env, index = 0): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...env, VLLM_SERVER_DEV_MODE: '1', PYTHONUNBUFFERED: '1' };
  if (cfg.model.num_gpus > 0) out.CUDA_VISIBLE_DEVICES = visibleDevices(engineGpus(cfg, index), env);
  // tempo_engine (the entry point, the worker extension) and tempo_common, what it shares with the trainer
  out.PYTHONPATH = [path.join(REPO_ROOT, 'workers'), env.PYTHONPATH].filter(Boolean).join(':');
  if (pullsFromStore(cfg)) {
    out.TEMPO_RL_ENGINE_WEIGHTS_DIR = env.TEMPO_RL_ENGINE_WEIGHTS_DIR ?? stateLayout(cfg.state_dir).engineWeights;
  }
  if (cfg.model.num_gpus === 0) {
    // Engines share the machine's cores, unpinned, and leave one to the server, the workers and the
    // trainer, which starve while vLLM's OpenMP pool spins (2 cores: a generate turn took 0.96 s
    // instead of 0.7 s; bench/rollout-profile.ts).
    const threads = Math.max(1, Math.floor((os.availableParallelism() - 1) / cfg.engines.count));
    out.VLLM_CPU_OMP_THREADS_BIND = env.VLLM_CPU_OMP_THREADS_BIND ?? 'nobind';
    out.OMP_NUM_THREADS = env.OMP_NUM_THREADS ?? String(threads);
    if (inProcessCpuWorker(cfg)) out.VLLM_ENABLE_V1_MULTIPROCESSING = env.VLLM_ENABLE_V1_MULTIPROCESSING ?? '0';
  }
  if (cfg.run.deterministic && cfg.model.num_gpus > 0) {
    // vLLM's batch-invariant kernels; FlashInfer's sampler is not deterministic across batches (vLLM #51187).
    out.VLLM_BATCH_INVARIANT = '1';
    out.VLLM_USE_FLASHINFER_SAMPLER = '0';
  }
  return out;
}

function recordPath(cfg: TempoConfig, index: number): string {
  return path.join(stateLayout(cfg.state_dir).engines, `engine-${index}.json`);
}

export function readEngineRecords(cfg: TempoConfig): EngineRecord[] {
  const dir = stateLayout(cfg.state_dir).engines;
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => /^engine-\d+\.json$/.test(f))
    .flatMap((f) => {
      try {
        return [EngineRecord.parse(readJsonRecord(path.join(dir, f)))];
      } catch {
        return [];
      }
    })
    .sort((a, b) => a.index - b.index);
}

function ours(rec: EngineRecord): boolean {
  return isAlive(rec.pid) && commandLine(rec.pid).includes(ENGINE_MODULE);
}

/** The URLs rollouts use: the external ones, else the recorded engines of this state directory. */
export function engineUrls(cfg: TempoConfig): string[] {
  if (cfg.engines.urls.length) return cfg.engines.urls.map((u) => u.replace(/\/+$/, ''));
  return readEngineRecords(cfg)
    .filter(ours)
    .map((r) => r.url);
}

/** Starts the missing engines of config.engines.count and waits until every one is healthy. */
export async function startEngines(cfg: TempoConfig): Promise<{ started: number; statuses: EngineStatus[] }> {
  if (cfg.engines.urls.length) {
    log.info({ urls: cfg.engines.urls }, 'engines.urls is set: using those engines, starting nothing');
    return { started: 0, statuses: await engineStatuses(cfg) };
  }
  const model = engineModel(cfg);
  if (!cfg.model.path && !existsSync(path.join(model, '.complete')))
    throw new Error(
      `the tiny model is missing at ${model}: run \`tempo-rl model tiny\` (bin/tempo-rl generates it at set-up)`,
    );
  checkGpuCount(cfg);
  const python = pythonBin();
  if (!existsSync(python)) throw new Error(`python not found at ${python}: run scripts/bootstrap.sh`);
  const dir = stateLayout(cfg.state_dir).engines;
  mkdirSync(dir, { recursive: true });
  const existing = new Map(readEngineRecords(cfg).map((r) => [r.index, r]));
  const launched: EngineRecord[] = [];
  const adopted: EngineRecord[] = [];
  for (let index = 0; index < cfg.engines.count; index++) {
    const port = cfg.engines.base_port + index;
    const rec = existing.get(index);
    if (rec && ours(rec) && rec.port === port) {
      // Still booting (port closed) or healthy: keep it. Listening but unhealthy (its engine core died,
      // e.g. OOM-killed, while the API process lives on): replace it.
      if (!(await portOpen(HOST, port)) || (await new VllmClient({ url: rec.url }).isHealthy())) {
        adopted.push(rec);
        continue;
      }
      log.warn({ url: rec.url, pid: rec.pid }, 'engine is up but unhealthy: restarting it');
      await stopRecorded(cfg, rec);
    }
    if (await portOpen(HOST, port))
      throw new Error(`port ${port} is taken by a process tempo-rl did not start; set engines.base_port`);
    const logFile = path.join(dir, `engine-${index}.log`);
    const { pid } = spawnDetached(python, engineArgs(cfg, port), {
      log: logFile,
      env: engineEnv(cfg, process.env, index),
    });
    const record: EngineRecord = {
      index,
      pid,
      port,
      url: `http://${HOST}:${port}`,
      model,
      log: logFile,
      started_at: new Date().toISOString(),
    };
    writeFileSync(recordPath(cfg, index), JSON.stringify(record));
    launched.push(record);
    log.info({ url: record.url, pid, log: logFile }, 'engine starting');
  }
  try {
    await Promise.all([...adopted, ...launched].map((rec) => waitHealthy(rec, cfg.engines.startup_timeout_s * 1000)));
  } catch (err) {
    await Promise.all(launched.map((rec) => stopRecorded(cfg, rec)));
    throw err;
  }
  return { started: launched.length, statuses: await engineStatuses(cfg) };
}

/** The engines' GPUs exist (counted by nvidia-smi where it runs; CUDA_VISIBLE_DEVICES is checked by visibleDevices). */
function checkGpuCount(cfg: TempoConfig): void {
  if (cfg.model.num_gpus === 0 || process.env.CUDA_VISIBLE_DEVICES !== undefined) return;
  const listed = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8' });
  if (listed.status !== 0) return;
  const have = listed.stdout.split('\n').filter((l) => l.startsWith('GPU ')).length;
  const need = Math.max(...Array.from({ length: cfg.engines.count }, (_, i) => Math.max(...engineGpus(cfg, i)))) + 1;
  if (need > have)
    throw new Error(
      `the engines need ${need} GPUs and this host has ${have} (engines.count ${cfg.engines.count}, ${gpusPerEngine(cfg)} per engine, ` +
        `${cfg.engines.colocate ? "on the trainer's GPUs" : `after the trainer's ${cfg.model.num_gpus}`}: set engines.colocate or fewer engines)`,
    );
}

async function waitHealthy(rec: EngineRecord, timeoutMs: number): Promise<void> {
  const client = new VllmClient({ url: rec.url });
  await waitFor(
    async () => !isAlive(rec.pid) || (await client.isHealthy(2_000)),
    `engine ${rec.url}`,
    timeoutMs,
    1_000,
  );
  if (!isAlive(rec.pid))
    throw new Error(`engine ${rec.url} exited at start; last lines of ${rec.log}:\n${tail(rec.log, 15)}`);
  const caps = await probeCapabilities(rec.url);
  if (!caps.ok)
    throw new Error(`engine ${rec.url} lacks ${caps.missing.map((m) => `${m.route} (${m.enable})`).join(', ')}`);
  log.info({ url: rec.url, version: caps.version }, 'engine healthy');
}

function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

async function stopRecorded(cfg: TempoConfig, rec: EngineRecord): Promise<boolean> {
  const mine = ours(rec);
  if (mine) await stopProcess(rec.pid, 15_000);
  rmSync(recordPath(cfg, rec.index), { force: true });
  return mine;
}

/** Stops the engines this state directory recorded; returns how many were running. */
export async function stopEngines(cfg: TempoConfig): Promise<number> {
  if (cfg.engines.urls.length) return 0;
  const stopped = await Promise.all(readEngineRecords(cfg).map((rec) => stopRecorded(cfg, rec)));
  return stopped.filter(Boolean).length;
}

export async function engineStatuses(cfg: TempoConfig): Promise<EngineStatus[]> {
  const external = cfg.engines.urls.length > 0;
  const targets = external
    ? cfg.engines.urls.map((url) => ({
        url: url.replace(/\/+$/, ''),
        pid: null as number | null,
        log: null as string | null,
      }))
    : readEngineRecords(cfg).map((r) => ({ url: r.url, pid: ours(r) ? r.pid : null, log: r.log }));
  return Promise.all(
    targets.map(async (t): Promise<EngineStatus> => {
      const client = new VllmClient({ url: t.url, timeoutMs: 5_000 });
      const alive = external || t.pid !== null;
      const healthy = alive && (await client.isHealthy());
      if (!healthy)
        return {
          url: t.url,
          external,
          pid: t.pid,
          healthy,
          version: null,
          missing_routes: [],
          metrics: null,
          log: t.log,
        };
      const [caps, metrics] = await Promise.all([
        probeCapabilities(t.url).catch(() => null),
        client.metrics().catch(() => null),
      ]);
      return {
        url: t.url,
        external,
        pid: t.pid,
        healthy,
        version: caps?.version ?? null,
        missing_routes: caps?.missing.map((m) => m.route) ?? [],
        metrics,
        log: t.log,
      };
    }),
  );
}
