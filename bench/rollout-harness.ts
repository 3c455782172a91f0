// What the rollout benches share (bench/overhead.ts, bench/rollout-path.ts): a Temporal dev server with
// the stack's rollout worker processes, episodes started on it by a client with at most N in flight,
// where each episode's time went (from its history), and measurements that note the machine's load and
// are taken again when other processes were busy. Everything started here is stopped by cleanupAll(),
// also on SIGINT/SIGTERM.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { createActivities, type RolloutActivities, type RolloutDeps } from '../activities/index.js';
import { rolloutWorkerProcesses, type TempoConfig } from '../config/schema.js';
import { parsePrometheus } from '../engine/metrics.js';
import { REPO_ROOT } from '../base/paths.js';
import { stateLayout } from '../stores/layout.js';
import { connectClient } from '../supervise/temporal.js';
import {
  EPISODE_WORKFLOW_TYPE,
  WORKFLOW_TASK_TIMEOUT,
  episodeId,
  type EpisodeInput,
  type EpisodeSummary,
} from '../protocol/episode.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import { startRolloutWorker, startTestServer, stopChild, type TestServer } from '../testing/temporal.js';
import { rolloutWorkerSlots } from '../rollout/worker.js';
import { breakdown, measured, meanBreakdown, round, type HistoryBreakdown, type LoadReport } from './overhead-stats.js';

export const print = (s = '') => process.stdout.write(`${s}\n`);

/** Qwen's <tool_call> (a single token): a synthetic policy's turn ends when it samples it. */
export const TOOL_CALL_ID = 151657;
/** `n` ordinary tokens of Qwen's vocabulary (word pieces, no special or end-of-sequence token): a
 *  synthetic policy that samples only among them never stops before its budget. */
export function wordIds(n: number): number[] {
  return Array.from({ length: n }, (_, i) => 1000 + i);
}

// ---- clean-up of everything started here, also on SIGINT/SIGTERM ----
const cleanups: Array<() => Promise<unknown>> = [];
export function onCleanup(fn: () => Promise<unknown>): void {
  cleanups.push(fn);
}
export async function cleanupAll(): Promise<void> {
  while (cleanups.length) await cleanups.pop()!().catch((err) => console.error(`clean-up: ${(err as Error).message}`));
}
for (const sig of ['SIGINT', 'SIGTERM'] as const)
  process.once(sig, () => {
    console.error(`${sig}: stopping what the bench started`);
    void cleanupAll().finally(() => process.exit(130));
  });

/** Runs fn over items with at most `limit` in flight (a sliding window). */
export async function windowed<T, R>(items: T[], limit: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!, i);
      }
    }),
  );
  return out;
}

export interface Stack {
  server: TestServer;
  cfg: TempoConfig;
  client: Client;
  acts: RolloutActivities;
  store: LocalBlobStore;
  /** The rollout worker processes' pids (none: the worker runs in this process). */
  workerPids: number[];
  /** Our processes by name, for the CPU accounting of overhead-stats.ts measured(). */
  roots: () => Map<string, number[]>;
  /** The Temporal server's pids: StackOptions.serverPids, else the embedded server's (its record). */
  serverPids: () => number[];
}

export const WORKER_ROOT = 'rollout workers (node)';
export const INPROC_ROOT = 'bench+worker (node)';
export const BENCH_ROOT = 'bench (node)';

export interface StackOptions {
  /** Config keys (`section.key=value`) of the stack. */
  sets: string[];
  /** vllm: the production worker over the config's engines; double: the same worker over the no-op
   *  engine of bench/overhead-direct.ts (BENCH_ENGINE_LATENCY_MS). */
  mode: 'vllm' | 'double';
  /** The direct path's dependencies (and the in-process worker's). */
  deps: (cfg: TempoConfig, store: LocalBlobStore) => Promise<Omit<RolloutDeps, 'cfg' | 'store'>>;
  /** child: rollout.worker_processes processes of their own, as the stack starts them; inproc: one
   *  worker in this process, sharing its event loop with the client. */
  worker: 'child' | 'inproc';
  extraRoots?: () => Map<string, number[]>;
  /** The pids of a server the stack reaches by `temporal.address` (bench/temporal-cluster.sh), the
   *  Temporal server's first, then its database's: their CPU and the first's counters are measured as
   *  the embedded server's are. */
  serverPids?: number[];
}

/** One rollout worker process (bench/overhead-worker.ts: the production createRolloutWorker), ready
 *  once it polls. BENCH_WORKER_NODE_ARGS: node flags for it (e.g. --cpu-prof). */
async function spawnWorker(cfgFile: string, mode: 'vllm' | 'double', log: string): Promise<number> {
  const nodeArgs = process.env.BENCH_WORKER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child = spawn(
    process.execPath,
    [...nodeArgs, '--import', 'tsx', path.join(REPO_ROOT, 'bench', 'overhead-worker.ts'), cfgFile, mode],
    { cwd: REPO_ROOT, env: { ...process.env, TEMPORAL_ADDRESS: '' }, stdio: ['ignore', 'pipe', openSync(log, 'a')] },
  );
  onCleanup(() => stopChild(child));
  await new Promise<void>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buf += chunk.toString();
      if (buf.includes('worker-ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`a bench worker exited (${code}); see ${log}`)));
  });
  child.stdout!.resume();
  return child.pid!;
}

/** A dev server, the stack's rollout worker(s), a client, and the activity functions of the direct path. */
export async function startStack(o: StackOptions): Promise<Stack> {
  const server = await startTestServer(o.sets);
  onCleanup(() => server.stop());
  const cfg = server.cfg;
  const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
  const d: RolloutDeps = { cfg, store, ...(await o.deps(cfg, store)) };
  let workerPids: number[] = [];
  if (o.worker === 'inproc') {
    const worker = await startRolloutWorker(cfg, d);
    onCleanup(() => worker.stop());
  } else {
    const dir = path.join(server.stateDir, 'workers');
    mkdirSync(dir, { recursive: true });
    const cfgFile = path.join(dir, 'bench-config.json');
    writeFileSync(cfgFile, JSON.stringify(cfg));
    const n = rolloutWorkerProcesses(cfg.rollout);
    workerPids = await Promise.all(
      Array.from({ length: n }, (_, i) => spawnWorker(cfgFile, o.mode, path.join(dir, `bench-worker-${i}.log`))),
    );
  }
  const client = await connectClient(cfg);
  onCleanup(() => client.connection.close());
  const serverPids = () => {
    if (o.serverPids?.length) return o.serverPids;
    try {
      return [JSON.parse(readFileSync(stateLayout(cfg.state_dir).serverRecord, 'utf8')).pid as number];
    } catch {
      return [];
    }
  };
  const roots = () =>
    new Map([
      [o.worker === 'inproc' ? INPROC_ROOT : BENCH_ROOT, [process.pid]],
      ...(workerPids.length ? [[WORKER_ROOT, workerPids] as [string, number[]]] : []),
      ['temporal server', serverPids()],
      ...(o.extraRoots?.() ?? []),
    ]);
  return { server, cfg, client, acts: createActivities(d), store, workerPids, roots, serverPids };
}

/** The TCP ports a process listens on (Linux /proc). */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    const m = /^socket:\[(\d+)\]$/.exec(readlinkOr(`/proc/${pid}/fd/${fd}`));
    if (m) inodes.add(m[1]!);
  }
  const ports: number[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(table)) continue;
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[3] === '0A' && inodes.has(f[9]!)) ports.push(Number.parseInt(f[1]!.split(':')[1]!, 16));
    }
  }
  return ports;
}
function readlinkOr(p: string): string {
  try {
    return readlinkSync(p);
  } catch {
    return '';
  }
}

/** The server's Prometheus counters whose name starts with `prefix`, summed over labels (its
 *  metrics listen on a port of its own choosing); null when none answers. */
export async function serverCounters(stack: Stack, prefix: string): Promise<Record<string, number> | null> {
  const [pid] = stack.serverPids();
  if (pid === undefined) return null;
  for (const port of listeningPorts(pid)) {
    const text = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(2000) })
      .then((r) => (r.ok ? r.text() : ''))
      .catch(() => '');
    if (!text.includes('# TYPE')) continue;
    const sums: Record<string, number> = {};
    for (const [name, value] of parsePrometheus(text)) if (name.startsWith(prefix)) sums[name] = value;
    return sums;
  }
  return null;
}

/** Activities the server has handed back with a workflow task's completion so far (eager), or null. */
export async function eagerActivities(stack: Stack): Promise<number | null> {
  const c = await serverCounters(stack, 'activity_eager_execution');
  return c ? Object.values(c).reduce((a, b) => a + b, 0) : null;
}

/** The name under which measured() counts the rollout worker's CPU. */
export const workerRoot = (stack: Stack) => (stack.workerPids.length ? WORKER_ROOT : INPROC_ROOT);

/** How the stack's workers take work: processes and each one's slots (rollout/worker.ts). */
export function workerSetup(stack: Stack): Record<string, unknown> {
  return {
    processes: stack.workerPids.length || 'in the bench process',
    slots_per_process: rolloutWorkerSlots(stack.cfg),
  };
}

export interface WfEpisode {
  workflowId: string;
  runId: string;
  /** Client clock (ms): start called, start returned, result returned. */
  t_start_call: number;
  t_started: number;
  t_result: number;
  summary: EpisodeSummary;
}

/** Starts each input's episode workflow on the stack's rollout queue, at most `conc` in flight. */
export async function workflowBatch(
  stack: Stack,
  inputs: EpisodeInput[],
  conc: number,
  tag: string,
): Promise<WfEpisode[]> {
  return windowed(inputs, conc, async (input) => {
    const workflowId = `bench/${tag}/${episodeId(input)}`;
    const t_start_call = Date.now();
    const h = await stack.client.workflow.start(EPISODE_WORKFLOW_TYPE, {
      taskQueue: stack.cfg.temporal.task_queues.rollout,
      workflowId,
      args: [input],
      workflowTaskTimeout: WORKFLOW_TASK_TIMEOUT,
    });
    const t_started = Date.now();
    const summary = (await h.result()) as EpisodeSummary;
    return { workflowId, runId: h.firstExecutionRunId, t_start_call, t_started, t_result: Date.now(), summary };
  });
}

/** The histories of a batch: the server-side breakdown, and the client's own waits around it. */
export async function historyReport(
  stack: Stack,
  eps: WfEpisode[],
): Promise<{ breakdowns: HistoryBreakdown[]; client: Record<string, number>; summary: Record<string, unknown> }> {
  const breakdowns: HistoryBreakdown[] = [];
  const startLag: number[] = [];
  const resultLag: number[] = [];
  await windowed(eps, 16, async (e) => {
    const events = (await stack.client.workflow.getHandle(e.workflowId, e.runId).fetchHistory()).events ?? [];
    breakdowns.push(breakdown(events));
    const t = (i: number) => Number(events[i]!.eventTime!.seconds) * 1000 + (events[i]!.eventTime!.nanos ?? 0) / 1e6;
    startLag.push(t(0) - e.t_start_call);
    resultLag.push(e.t_result - t(events.length - 1));
  });
  const mean = (xs: number[]) => round(xs.reduce((a, b) => a + b, 0) / (xs.length || 1), 2);
  return {
    breakdowns,
    client: {
      start_call_to_started_event_ms: mean(startLag),
      completed_event_to_result_ms: mean(resultLag),
      start_call_ms: mean(eps.map((e) => e.t_started - e.t_start_call)),
    },
    summary: meanBreakdown(breakdowns),
  };
}

export function summaries(s: EpisodeSummary[]): {
  turns: Record<string, number>;
  status: Record<string, number>;
  mean_turns: number;
  mean_response_len: number;
} {
  const turns: Record<string, number> = {};
  const status: Record<string, number> = {};
  for (const x of s) {
    turns[x.turns] = (turns[x.turns] ?? 0) + 1;
    status[x.status] = (status[x.status] ?? 0) + 1;
  }
  return {
    turns,
    status,
    mean_turns: round(s.reduce((a, x) => a + x.turns, 0) / s.length, 2),
    mean_response_len: round(s.reduce((a, x) => a + x.response_len, 0) / s.length, 1),
  };
}

/** A batch with FAILED episodes (a dead engine) measures nothing: stop there. */
export function checkHealthy(s: { status: Record<string, number> }, what: string): void {
  if (s.status.FAILED)
    throw new Error(
      `${what}: ${s.status.FAILED} episodes FAILED (${JSON.stringify(s.status)}); the measurement stops here`,
    );
}

export interface NoiseOptions {
  /** Before each measurement, wait up to this long for other processes to use under 0.3 cores. */
  quietWaitS: number;
  /** A measurement during which other processes used more cores than this on average is taken again … */
  noisyCores: number;
  /** … up to this many times. */
  noisyRetries: number;
}

/** measured(), taken again while other processes were busy during it; the discarded runs go to `discarded`. */
export async function measuredClean<T>(
  roots: () => Map<string, number[]>,
  fn: (attempt: number) => Promise<T>,
  what: string,
  discarded: Array<Record<string, unknown>>,
  noise: NoiseOptions,
) {
  for (let attempt = 0; ; attempt++) {
    const m = await measured(roots, () => fn(attempt), noise.quietWaitS);
    const others = m.load.other_cpu_s / m.wall_s;
    if (others <= noise.noisyCores || attempt >= noise.noisyRetries) return m;
    discarded.push({ what, attempt, wall_s: round(m.wall_s), load: m.load });
    print(
      `  ${what}: ${m.wall_s.toFixed(2)} s NOISY (other processes ${round(others, 2)} cores, ${fmtLoad(m.load)}): measuring again`,
    );
  }
}

export const fmtCpu = (l: LoadReport) =>
  Object.entries(l.cpu_s)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
export const fmtLoad = (l: LoadReport) =>
  `${l.quiet_wait ? `${l.quiet_wait.quiet ? 'quiet' : 'NOT QUIET'} after ${l.quiet_wait.waited_s} s (others ${l.quiet_wait.other_cores} cores); ` : ''}load ${l.loadavg_start.join('/')}→${l.loadavg_end.join('/')} (max1 ${l.load1_max}${l.loaded ? ', LOADED >2.5' : ''}), CPU-s: ${fmtCpu(l)}, other procs ${l.other_cpu_s}, kernel ${l.kernel_cpu_s}`;
