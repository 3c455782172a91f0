// Starts the Python environment worker (workers/environments: `python -m environments`) with the
// Temporal settings of the config and its stack's environment queue, in the worker's own Python
// environment (workers/environments/pyproject.toml). Started only for a run of a Python environment.
import { spawn } from 'node:child_process';
import path from 'node:path';
import type { TempoConfig } from '../config/schema.js';
import { PYTHON_ENVIRONMENTS } from '../lib/env/registry.js';
import { cacheDir, envPythonBin, REPO_ROOT } from '../base/paths.js';
import { temporalAddress } from './temporal.js';
import { trainerTemporalEnv } from './trainer-process.js';

export function needsEnvironmentWorker(cfg: TempoConfig): boolean {
  return PYTHON_ENVIRONMENTS.includes(cfg.rollout.environment);
}

export function environmentWorkerCommand(cfg: TempoConfig): { cmd: string; args: string[]; env: NodeJS.ProcessEnv } {
  const uv = process.env.TEMPO_RL_UV;
  const env: NodeJS.ProcessEnv = {
    ...trainerTemporalEnv(cfg),
    PYTHONPATH: [path.join(REPO_ROOT, 'workers', 'environments'), process.env.PYTHONPATH].filter(Boolean).join(':'),
    PYTHONUNBUFFERED: '1',
    // verifiers prepares its harness programs with uv (PEP 723 scripts): tempo-rl's own uv, its cache.
    ...(uv ? { PATH: [path.dirname(uv), process.env.PATH].filter(Boolean).join(':') } : {}),
    UV_CACHE_DIR: process.env.UV_CACHE_DIR ?? path.join(cacheDir(), 'uv-cache'),
    TEMPO_RL_LOG_LEVEL: cfg.log_level,
  };
  const args = [
    '-m',
    'environments',
    '--address',
    temporalAddress(cfg),
    '--namespace',
    cfg.temporal.namespace,
    '--task-queue',
    cfg.temporal.task_queues.environments,
    '--no-config-file',
  ];
  return { cmd: envPythonBin(), args, env };
}

/** Runs one environment worker process in the foreground; resolves with its exit code. */
export function runEnvironmentWorker(cfg: TempoConfig): Promise<number> {
  const { cmd, args, env } = environmentWorkerCommand(cfg);
  const child = spawn(cmd, args, { stdio: 'inherit', env, cwd: REPO_ROOT });
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => child.kill(sig));
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))));
}
