// Brings up what a training run needs and is not running yet — the embedded Temporal server, the
// engines, the rollout and trainer workers — and stops exactly what it started.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { TempoConfig } from '../config/schema.js';
import { engineStatuses, startEngines, stopEngines } from './engines.js';
import { childLogger } from './log.js';
import { REPO_ROOT, stateLayout } from './paths.js';
import { commandLine, isAlive, spawnDetached, stopProcess } from './process.js';
import { serverStatus, startServer, stopServer } from './server.js';
import { trainerCommand } from '../workers/trainer-process.js';

const log = childLogger('stack');
export type WorkerKind = 'rollout' | 'trainer';

function workerRecordPath(cfg: TempoConfig, kind: WorkerKind): string {
  return path.join(stateLayout(cfg.state_dir).workers, `${kind}.json`);
}

export function workerPid(cfg: TempoConfig, kind: WorkerKind): number | null {
  try {
    const { pid } = JSON.parse(readFileSync(workerRecordPath(cfg, kind), 'utf8')) as { pid: number };
    return isAlive(pid) && commandLine(pid).includes(kind === 'rollout' ? 'worker' : 'trainer.worker') ? pid : null;
  } catch {
    return null;
  }
}

/** Starts a worker as a background process; the config travels as a resolved JSON (valid YAML) file. */
export function startWorker(cfg: TempoConfig, kind: WorkerKind): number {
  const dir = stateLayout(cfg.state_dir).workers;
  mkdirSync(dir, { recursive: true });
  const cfgFile = path.join(dir, 'config.json');
  writeFileSync(cfgFile, JSON.stringify(cfg));
  const logFile = path.join(dir, `${kind}.log`);
  const spawned =
    kind === 'rollout'
      ? spawnDetached(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'cli', 'main.ts'), '-c', cfgFile, 'worker', 'rollout'], { log: logFile, cwd: REPO_ROOT })
      : (() => {
          const { cmd, args, env } = trainerCommand(cfg);
          return spawnDetached(cmd, args, { log: logFile, env, cwd: REPO_ROOT });
        })();
  writeFileSync(workerRecordPath(cfg, kind), JSON.stringify({ pid: spawned.pid, log: logFile }));
  log.info({ kind, pid: spawned.pid, log: logFile }, 'worker started');
  return spawned.pid;
}

export async function stopWorker(cfg: TempoConfig, kind: WorkerKind, signal: 'graceful' | 'kill' = 'graceful'): Promise<boolean> {
  const pid = workerPid(cfg, kind);
  rmSync(workerRecordPath(cfg, kind), { force: true });
  if (!pid) return false;
  if (signal === 'kill') process.kill(-pid, 'SIGKILL');
  else await stopProcess(pid, 15_000);
  return true;
}

export interface Started {
  server: boolean;
  engines: boolean;
  rollout: boolean;
  trainer: boolean;
}

export async function ensureStack(cfg: TempoConfig): Promise<Started> {
  const started: Started = { server: false, engines: false, rollout: false, trainer: false };
  if (!(await serverStatus(cfg)).running) started.server = (await startServer(cfg)).started;
  if (!cfg.engines.urls.length) {
    const statuses = await engineStatuses(cfg);
    if (!statuses.length || statuses.some((s) => !s.healthy)) started.engines = (await startEngines(cfg)).started > 0;
  }
  for (const kind of ['rollout', 'trainer'] as const) {
    if (!workerPid(cfg, kind)) {
      startWorker(cfg, kind);
      started[kind] = true;
    }
  }
  return started;
}

export async function stopStarted(cfg: TempoConfig, started: Started): Promise<void> {
  if (started.rollout) await stopWorker(cfg, 'rollout');
  if (started.trainer) await stopWorker(cfg, 'trainer');
  if (started.engines) await stopEngines(cfg);
  if (started.server) await stopServer(cfg);
}
