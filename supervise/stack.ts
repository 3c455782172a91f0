// Brings up what a training run needs and is not running yet — the embedded Temporal server, the
// engines, the rollout and trainer workers — and stops exactly what it started. Workers are this
// stack's (its state dir's): they poll its own task queues (config/schema.ts stackTaskQueue).
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { rolloutWorkerProcesses, type TempoConfig } from '../config/schema.js';
import { engineStatuses, startEngines, stopEngines } from './engines.js';
import { childLogger } from '../base/log.js';
import { REPO_ROOT } from '../base/paths.js';
import { stateLayout } from '../stores/layout.js';
import { commandLine, isAlive, spawnDetached, stopProcess } from './process.js';
import { preflight } from './preflight.js';
import { serverStatus, startServer, stopServer } from './server.js';
import { activeTrainerPid, trainerCommand } from './trainer-process.js';
import { readJsonRecord } from '../base/bounded-file.js';
import { environmentWorkerCommand, needsEnvironmentWorker } from './environment-worker.js';

const log = childLogger('stack');
export const WORKER_KINDS = ['rollout', 'trainer', 'environments'] as const;
export type WorkerKind = (typeof WORKER_KINDS)[number];
// What a worker's command line holds, so that a recorded pid reused by another process is not "ours".
const WORKER_COMMAND = {
  rollout: 'worker rollout',
  trainer: 'trainer.worker',
  environments: '-m environments',
} as const;

function workerRecordPath(cfg: TempoConfig, kind: WorkerKind): string {
  return path.join(stateLayout(cfg.state_dir).workers, `${kind}.json`);
}

interface WorkerRecord {
  pid: number;
  /** Every process of the kind: the rollout worker's rollout.worker_processes, the trainer's standbys
   *  beside the first (run.trainer_standbys). */
  pids?: number[];
  log: string;
  task_queue?: string;
}

const ours = (pid: number, kind: WorkerKind) => isAlive(pid) && commandLine(pid).includes(WORKER_COMMAND[kind]);

function readWorkerRecord(cfg: TempoConfig, kind: WorkerKind): WorkerRecord | null {
  try {
    return readJsonRecord(workerRecordPath(cfg, kind)) as WorkerRecord;
  } catch {
    return null;
  }
}

/** The live processes of a kind this stack started (the trainer's standbys too). */
function workerPids(cfg: TempoConfig, kind: WorkerKind): number[] {
  return workerProcesses(cfg, kind).alive;
}

/** A kind's record (every pid it started, its log) and which of its processes are alive and ours. */
export function workerProcesses(
  cfg: TempoConfig,
  kind: WorkerKind,
): { record: { pids: number[]; log: string } | null; alive: number[] } {
  const rec = readWorkerRecord(cfg, kind);
  if (!rec) return { record: null, alive: [] };
  const pids = rec.pids ?? [rec.pid];
  return { record: { pids, log: rec.log }, alive: pids.filter((pid) => ours(pid, kind)) };
}

/** A live process of the kind (the active trainer when it is one of ours), or null. */
export function workerPid(cfg: TempoConfig, kind: WorkerKind): number | null {
  const pids = workerPids(cfg, kind);
  const active = kind === 'trainer' ? activeTrainerPid(cfg) : null;
  return active !== null && pids.includes(active) ? active : (pids[0] ?? null);
}

export interface WorkerStatus {
  kind: WorkerKind;
  running: boolean;
  /** The active process (the trainer holding its lock; the first rollout worker). */
  pid: number | null;
  /** Every live process of the kind (rollout: rollout.worker_processes of them, all polling). */
  pids: number[];
  /** The trainer's other live processes: its standbys. */
  standby_pids: number[];
  task_queue: string;
  log: string | null;
}

/** This stack's background workers: running or not, and the queue each polls (or would poll). */
export function workerStatuses(cfg: TempoConfig): WorkerStatus[] {
  return WORKER_KINDS.map((kind) => {
    const pid = workerPid(cfg, kind);
    const rec = pid ? readWorkerRecord(cfg, kind) : null;
    const pids = workerPids(cfg, kind);
    return {
      kind,
      running: pid !== null,
      pid,
      pids,
      standby_pids: kind === 'trainer' ? pids.filter((p) => p !== pid) : [],
      task_queue: rec?.task_queue ?? cfg.temporal.task_queues[kind],
      log: rec?.log ?? null,
    };
  });
}

/** Starts a kind's background processes (rollout: rollout.worker_processes of them; trainer: one and
 *  its standbys); the config travels as a resolved JSON (valid YAML) file. Returns the first's pid. */
export function startWorker(cfg: TempoConfig, kind: WorkerKind): number {
  const dir = stateLayout(cfg.state_dir).workers;
  mkdirSync(dir, { recursive: true });
  const cfgFile = path.join(dir, 'config.json');
  writeFileSync(cfgFile, JSON.stringify(cfg));
  const logFile = path.join(dir, `${kind}.log`);
  const spawn = () => {
    if (kind === 'rollout')
      return spawnDetached(
        process.execPath,
        ['--import', 'tsx', path.join(REPO_ROOT, 'cli', 'main.ts'), '-c', cfgFile, 'worker', 'rollout'],
        { log: logFile, cwd: REPO_ROOT },
      );
    const { cmd, args, env } = kind === 'trainer' ? trainerCommand(cfg) : environmentWorkerCommand(cfg);
    return spawnDetached(cmd, args, { log: logFile, env, cwd: REPO_ROOT });
  };
  const count =
    kind === 'trainer'
      ? 1 + cfg.run.trainer_standbys
      : kind === 'environments'
        ? cfg.python_env.workers
        : rolloutWorkerProcesses(cfg.rollout);
  const pids = Array.from({ length: count }, () => spawn().pid);
  const rec: WorkerRecord = { pid: pids[0]!, pids, log: logFile, task_queue: cfg.temporal.task_queues[kind] };
  writeFileSync(workerRecordPath(cfg, kind), JSON.stringify(rec));
  log.info({ kind, pids, log: logFile, task_queue: rec.task_queue }, 'worker started');
  return pids[0]!;
}

export async function stopWorker(
  cfg: TempoConfig,
  kind: WorkerKind,
  signal: 'graceful' | 'kill' = 'graceful',
): Promise<boolean> {
  // Standbys first: stopping the active trainer first would hand its lock to one of them.
  const active = workerPid(cfg, kind);
  const pids = workerPids(cfg, kind).sort((a, b) => Number(a === active) - Number(b === active));
  rmSync(workerRecordPath(cfg, kind), { force: true });
  for (const pid of pids) {
    if (signal === 'kill') process.kill(-pid, 'SIGKILL');
    else await stopProcess(pid, 15_000);
  }
  return pids.length > 0;
}

/** Stops this stack's background workers; returns the kinds that were running. */
export async function stopWorkers(cfg: TempoConfig): Promise<WorkerKind[]> {
  const stopped = await Promise.all(WORKER_KINDS.map(async (kind) => ((await stopWorker(cfg, kind)) ? kind : null)));
  return stopped.filter((k): k is WorkerKind => k !== null);
}

export interface Started {
  server: boolean;
  engines: boolean;
  rollout: boolean;
  trainer: boolean;
  /** The Python environment worker (python_env): only for a run of a Python environment. */
  environments: boolean;
}

export async function ensureStack(cfg: TempoConfig): Promise<Started> {
  await preflight(cfg);
  const started: Started = { server: false, engines: false, rollout: false, trainer: false, environments: false };
  if (!(await serverStatus(cfg)).running) started.server = (await startServer(cfg)).started;
  // The workers boot (imports, the workflow bundle) while the engines do: neither needs the other to
  // start, and an engine's start leaves a core idle much of the time (measured: the demo's start-up).
  for (const kind of WORKER_KINDS) {
    if (kind === 'environments' && !needsEnvironmentWorker(cfg)) continue;
    if (!workerPid(cfg, kind)) {
      startWorker(cfg, kind);
      started[kind] = true;
    }
  }
  if (!cfg.engines.urls.length) {
    const statuses = await engineStatuses(cfg);
    try {
      if (!statuses.length || statuses.some((s) => !s.healthy)) started.engines = (await startEngines(cfg)).started > 0;
    } catch (err) {
      // No engines: the workers started for them would only wait.
      for (const kind of WORKER_KINDS) if (started[kind]) await stopWorker(cfg, kind);
      throw err;
    }
  }
  return started;
}

/** Stops what `started` holds (workers first, the server last); returns what was still running then. */
export async function stopStarted(cfg: TempoConfig, started: Started): Promise<string[]> {
  const stopped: Started = { server: false, engines: false, rollout: false, trainer: false, environments: false };
  if (started.rollout) stopped.rollout = await stopWorker(cfg, 'rollout');
  if (started.trainer) stopped.trainer = await stopWorker(cfg, 'trainer');
  if (started.environments) stopped.environments = await stopWorker(cfg, 'environments');
  if (started.engines) stopped.engines = (await stopEngines(cfg)) > 0;
  if (started.server) stopped.server = await stopServer(cfg);
  return describeStarted(stopped);
}

const STARTED_NAMES = {
  server: 'Temporal server',
  engines: 'engines',
  rollout: 'rollout worker',
  trainer: 'trainer worker',
  environments: 'environment worker',
} as const;

/** The names of what `started` holds, for messages. */
export function describeStarted(started: Started): string[] {
  return (Object.keys(STARTED_NAMES) as Array<keyof Started>).filter((k) => started[k]).map((k) => STARTED_NAMES[k]);
}

/**
 * Until the returned function is called, Ctrl-C or SIGTERM stops what `started` holds before the
 * process exits: a foreground run's background workers must not outlive it and take the next
 * stack's tasks.
 */
export function stopStartedOnSignal(cfg: TempoConfig, started: Started): () => void {
  const onSignal = (sig: NodeJS.Signals) => {
    process.stderr.write(
      `\n${sig}: stopping what this command started (${describeStarted(started).join(', ') || 'nothing'})\n`,
    );
    void stopStarted(cfg, started).finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
}
