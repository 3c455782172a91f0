// What a foreground run (train, demo) checks before it starts anything and watches while it waits:
// the stack's workers and its engines. A run is durable, so nothing here stops it; but a command that
// follows a run whose rollout worker has died, or whose engines do not answer, would wait forever
// (the trainer retries a weight sync to an unreachable engine without end): it names what is wrong
// on the console within seconds and exits non-zero, and the run goes on once it is fixed.
import { readTail } from '../base/bounded-file.js';
import type { TempoConfig } from '../config/schema.js';
import { engineUrls, readEngineRecords } from './engines.js';
import { engineSilence, StackProblem } from './preflight.js';
import { needsEnvironmentWorker } from './environment-worker.js';
import { workerProcesses, WORKER_KINDS } from './stack.js';

/** How often the workers are checked, and how long an engine may not answer before the run command
 *  gives up on it (an engine busy loading weights still answers /health). */
export const WATCH_INTERVAL_MS = 2_000;
export const ENGINE_GRACE_MS = 30_000;

/** A worker kind none of whose processes is alive, named with the end of its log; null: all is well. */
function deadWorker(cfg: TempoConfig): string | null {
  // the environment worker runs only for Python environments (ensureStack starts it for those)
  for (const kind of WORKER_KINDS.filter((k) => k !== 'environments' || needsEnvironmentWorker(cfg))) {
    const w = workerProcesses(cfg, kind);
    if (!w.record) return `the ${kind} worker's record is gone (stopped by \`tempo-rl worker stop\`?)`;
    if (w.alive.length === 0)
      return `the ${kind} worker has exited (pid ${w.record.pids.join(', ')}); the end of ${w.record.log}:\n${readTail(w.record.log, 12)}`;
  }
  return null;
}

/** Engines of this stack whose process has exited (recorded, but not ours any more). */
function deadEngines(cfg: TempoConfig): string | null {
  if (cfg.engines.urls.length) return null;
  const live = new Set(engineUrls(cfg));
  const dead = readEngineRecords(cfg).filter((r) => !live.has(r.url));
  return dead.length
    ? dead
        .map((r) => `engine ${r.url} has exited (pid ${r.pid}); the end of ${r.log}:\n${readTail(r.log, 12)}`)
        .join('\n')
    : null;
}

export interface StackWatch {
  /** Rejects with a StackProblem when the stack cannot serve the run; never resolves. */
  failed: Promise<never>;
  stop(): void;
}

/**
 * Watches the stack of a run being followed: every WATCH_INTERVAL_MS its recorded workers (a kind
 * with no live process fails at once: nothing restarts it) and its engines' processes, and each
 * engine's /health (a warning at the first silence, a failure after ENGINE_GRACE_MS of it).
 */
export function watchStack(
  cfg: TempoConfig,
  opts: { warn?: (line: string) => void; intervalMs?: number; engineGraceMs?: number } = {},
): StackWatch {
  const warn = opts.warn ?? ((line) => process.stderr.write(`${line}\n`));
  const grace = opts.engineGraceMs ?? ENGINE_GRACE_MS;
  const silentSince = new Map<string, number>();
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const failed = new Promise<never>((_, reject) => {
    const tick = async () => {
      const dead = deadWorker(cfg) ?? deadEngines(cfg);
      if (dead) return reject(new StackProblem(dead));
      for (const url of engineUrls(cfg)) {
        const why = await engineSilence(url);
        if (why === null) {
          if (silentSince.delete(url)) warn(`engine ${url} answers again`);
          continue;
        }
        const since = silentSince.get(url) ?? Date.now();
        if (!silentSince.has(url)) {
          silentSince.set(url, since);
          warn(`warning: engine ${url} does not answer (GET /health: ${why}); the run waits for it`);
        }
        if (Date.now() - since >= grace)
          return reject(
            new StackProblem(`engine ${url} has not answered for ${Math.round(grace / 1000)} s (GET /health: ${why})`),
          );
      }
      if (!stopped) timer = setTimeout(() => void tick(), opts.intervalMs ?? WATCH_INTERVAL_MS);
    };
    timer = setTimeout(() => void tick(), opts.intervalMs ?? WATCH_INTERVAL_MS);
  });
  failed.catch(() => undefined);
  return {
    failed,
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
