// Starts the Python trainer worker (workers/trainer) with the Temporal settings of the config and its
// stack's task queue and blob store; with model.num_gpus above 1, through torchrun, one process per GPU
// (rank 0 is the Temporal worker: workers/trainer/worker/data_parallel.py).
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { TempoConfig } from '../config/schema.js';
import { pythonBin, REPO_ROOT } from '../base/paths.js';
import { stateLayout } from '../stores/layout.js';
import { isAlive } from './process.js';
import { temporalAddress } from './temporal.js';
import { configuredBlobStoreUri } from '../lib/blob-store-config.js';
import { RECORD_FILE, readBoundedText } from '../base/bounded-file.js';

/** The resolved Temporal settings as the standard TEMPORAL_* variables, which the trainer's
 *  temporalio.envconfig reads. Inherited TEMPORAL_* variables are dropped: the config already
 *  resolved them, and a stale one must not reach the trainer under the resolved ones. */
export function trainerTemporalEnv(cfg: TempoConfig, inherited: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const t = cfg.temporal;
  const env: NodeJS.ProcessEnv = Object.fromEntries(
    Object.entries(inherited).filter(([k]) => !k.startsWith('TEMPORAL_')),
  );
  env.TEMPORAL_ADDRESS = temporalAddress(cfg);
  env.TEMPORAL_NAMESPACE = t.namespace;
  const vars: Array<[string, string]> = [
    ['TEMPORAL_API_KEY', t.api_key],
    ['TEMPORAL_TLS', t.tls.enabled ? 'true' : ''],
    ['TEMPORAL_TLS_CLIENT_CERT_PATH', t.tls.client_cert_path],
    ['TEMPORAL_TLS_CLIENT_KEY_PATH', t.tls.client_key_path],
    ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', t.tls.server_ca_cert_path],
    ['TEMPORAL_TLS_CLIENT_CERT_DATA', t.tls.client_cert_data],
    ['TEMPORAL_TLS_CLIENT_KEY_DATA', t.tls.client_key_data],
    ['TEMPORAL_TLS_SERVER_CA_CERT_DATA', t.tls.server_ca_cert_data],
    ['TEMPORAL_TLS_SERVER_NAME', t.tls.server_name],
  ];
  for (const [name, value] of vars) if (value) env[name] = value;
  return env;
}

export function trainerCommand(cfg: TempoConfig): { cmd: string; args: string[]; env: NodeJS.ProcessEnv } {
  const t = cfg.temporal;
  const env: NodeJS.ProcessEnv = {
    ...trainerTemporalEnv(cfg),
    PYTHONPATH: [path.join(REPO_ROOT, 'workers'), process.env.PYTHONPATH].filter(Boolean).join(':'),
    PYTHONUNBUFFERED: '1',
    // run.deterministic needs a fixed cuBLAS workspace, set before the first kernel of the process
    // (a trainer outlives runs, so it is set for all; docs/certification.md). The value is
    // workers/trainer/step/determinism.py's CUBLAS_WORKSPACE, which Python entry points set themselves.
    CUBLAS_WORKSPACE_CONFIG: process.env.CUBLAS_WORKSPACE_CONFIG ?? ':4096:8',
  };
  const args = [
    '-m',
    'trainer.worker',
    '--address',
    temporalAddress(cfg),
    '--namespace',
    t.namespace,
    '--task-queue',
    t.task_queues.trainer,
    '--blob-store',
    configuredBlobStoreUri(cfg),
    // The stack's trainer processes: one active (holds the lock), the others standing by (workers/trainer/worker/standby.py).
    '--lock-file',
    stateLayout(cfg.state_dir).trainerLock,
    '--inflight-dir',
    stateLayout(cfg.state_dir).inflight('trainer'),
    '--scratch-dir',
    stateLayout(cfg.state_dir).trainerScratch,
    // The settings above are resolved already (profile included): the trainer must not re-read a profile.
    '--no-config-file',
  ];
  return { cmd: pythonBin(), args: [...torchrunArgs(cfg), ...args], env };
}

/** torchrun's flags before `-m trainer.worker`, or none on one device. One node: --standalone picks a
 *  free rendezvous port. A group whose rank failed is restarted whole (rank 0 then fails the dead
 *  attempt's activities over, as a standby would). Several nodes: docs/ARCHITECTURE.md. */
export function torchrunArgs(cfg: TempoConfig): string[] {
  if (cfg.model.num_gpus <= 1) return [];
  return [
    '-m',
    'torch.distributed.run',
    '--standalone',
    '--nproc-per-node',
    String(cfg.model.num_gpus),
    '--max-restarts',
    '3',
  ];
}

/** The pid of the stack's active trainer (the one holding the trainer lock: workers/trainer/worker/standby.py), or null. */
export function activeTrainerPid(cfg: TempoConfig): number | null {
  try {
    const pid = Number(readBoundedText(stateLayout(cfg.state_dir).trainerLock, RECORD_FILE).trim().split(' ')[0]);
    return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : null;
  } catch {
    return null;
  }
}

/** The trainer processes of the stack that stand by, ready (imports done, waiting on the lock). */
export function readyTrainerStandbys(cfg: TempoConfig): number[] {
  try {
    return readdirSync(`${stateLayout(cfg.state_dir).trainerLock}.standby`)
      .map(Number)
      .filter((pid) => Number.isInteger(pid) && isAlive(pid));
  } catch {
    return [];
  }
}

/** Runs the trainer worker in the foreground; resolves with its exit code. */
export function runTrainerWorker(cfg: TempoConfig): Promise<number> {
  const { cmd, args, env } = trainerCommand(cfg);
  const child = spawn(cmd, args, { stdio: 'inherit', env, cwd: REPO_ROOT });
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => child.kill(sig));
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))));
}
