// bench/overhead.ts's measuring helpers: the load and CPU of the machine during a measurement (ours
// and everyone else's), and where an episode workflow's time went, from its history.
import { readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';
import type { temporal } from '@temporalio/proto';

type Event = temporal.api.history.v1.IHistoryEvent;

const TICK = 100; // USER_HZ: /proc times are in 1/100 s on Linux

/** Busy CPU seconds of the whole machine (/proc/stat, all but idle and iowait), and its irq + softirq part. */
function machineStat(): { busy: number; irq: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = f as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return { busy: (user + nice + system + irq + softirq + steal) / TICK, irq: (irq + softirq) / TICK };
}

function procTable(): Map<number, { ppid: number; cpu: number }> {
  const out = new Map<number, { ppid: number; cpu: number }>(); // ppid 2 (kthreadd): a kernel thread
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // fields after the name: state(0) ppid(1) … utime(11) stime(12). Not cutime/cstime: a parent that
      // reaps a child would jump by the child's whole life (a dead child's time is left unattributed).
      out.set(Number(name), { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) / TICK });
    } catch {
      /* gone */
    }
  }
  return out;
}

/** CPU seconds of our processes (the given roots and all their descendants), by root name. */
function ourCpu(
  roots: Map<string, number[]>,
  table = procTable(),
): { byName: Record<string, number>; total: number; pids: Set<number> } {
  const children = new Map<number, number[]>();
  for (const [pid, p] of table) children.set(p.ppid, [...(children.get(p.ppid) ?? []), pid]);
  const byName: Record<string, number> = {};
  const seen = new Set<number>();
  // A root's tree stops at another root (the server and the engines are children of the bench process).
  const allRoots = new Set([...roots.values()].flat());
  let total = 0;
  for (const [name, pids] of roots) {
    const stack = [...pids];
    let sum = 0;
    while (stack.length) {
      const pid = stack.pop()!;
      if (seen.has(pid)) continue;
      seen.add(pid);
      sum += table.get(pid)?.cpu ?? 0;
      stack.push(...(children.get(pid) ?? []).filter((c) => !allRoots.has(c)));
    }
    byName[name] = sum;
    total += sum;
  }
  return { byName, total, pids: seen };
}

/** CPU seconds between two process tables of the processes that are not ours: user processes, and kernel threads. */
function othersCpu(
  t0: Map<number, { ppid: number; cpu: number }>,
  t1: Map<number, { ppid: number; cpu: number }>,
  ours: Set<number>,
): { procs: number; kthreads: number } {
  let procs = 0;
  let kthreads = 0;
  for (const [pid, p] of t1) {
    if (ours.has(pid)) continue;
    const d = p.cpu - (t0.get(pid)?.cpu ?? 0);
    if (p.ppid === 2 || pid === 2) kthreads += d;
    else procs += d;
  }
  return { procs, kthreads };
}

export interface LoadReport {
  /** os.loadavg() at the start and the end, and the highest 1-minute value seen (sampled each second). */
  loadavg_start: number[];
  loadavg_end: number[];
  load1_max: number;
  /** The 1-minute load average went above 2.5 during the measurement (ours included). */
  loaded: boolean;
  /** CPU seconds used during the measurement: by our processes (by name); by all other user processes
   *  (other_cpu_s: someone else's load); by the kernel (kernel threads + irq/softirq: much of it is our
   *  own loopback traffic); the rest of the machine's busy time (exited processes); and cores × wall. */
  cpu_s: Record<string, number>;
  kernel_cpu_s: number;
  unattributed_cpu_s: number;
  /** Before the measurement: how long it waited for the others to go quiet, and their last share (cores). */
  quiet_wait?: { waited_s: number; other_cores: number; quiet: boolean; ours_idle_cores: Record<string, number> };
  other_cpu_s: number;
  capacity_cpu_s: number;
}

/** Measures the machine around `fn`; `roots()` names our processes (pids whose trees are ours). */
export async function measured<T>(
  roots: () => Map<string, number[]>,
  fn: () => Promise<T>,
  quietWaitS = 0,
): Promise<{ value: T; wall_s: number; load: LoadReport }> {
  const quiet_wait = quietWaitS > 0 ? await waitQuiet(roots, quietWaitS) : undefined;
  const loadavg_start = os.loadavg();
  let load1_max = loadavg_start[0]!;
  const timer = setInterval(() => (load1_max = Math.max(load1_max, os.loadavg()[0]!)), 1000);
  const r = roots();
  const m0 = machineStat();
  const table0 = procTable();
  const ours0 = ourCpu(r, table0);
  const t0 = performance.now();
  try {
    const value = await fn();
    const wall_s = (performance.now() - t0) / 1000;
    const table1 = procTable();
    const ours1 = ourCpu(r, table1);
    const m1 = machineStat();
    const loadavg_end = os.loadavg();
    load1_max = Math.max(load1_max, loadavg_end[0]!);
    // A root gone meanwhile (a dead engine) counts nothing rather than minus its past.
    const cpu_s = Object.fromEntries(
      Object.entries(ours1.byName).map(([k, v]) => [k, round(Math.max(0, v - (ours0.byName[k] ?? 0)), 2)]),
    );
    const others = othersCpu(table0, table1, new Set([...ours0.pids, ...ours1.pids]));
    const kernel = others.kthreads + (m1.irq - m0.irq);
    const oursTotal = Object.values(cpu_s).reduce((a, b) => a + b, 0);
    return {
      value,
      wall_s,
      load: {
        ...(quiet_wait ? { quiet_wait } : {}),
        loadavg_start: loadavg_start.map((x) => round(x, 2)),
        loadavg_end: loadavg_end.map((x) => round(x, 2)),
        load1_max: round(load1_max, 2),
        loaded: load1_max > 2.5,
        cpu_s,
        other_cpu_s: round(others.procs, 2),
        kernel_cpu_s: round(kernel, 2),
        unattributed_cpu_s: round(m1.busy - m0.busy - oursTotal - others.procs - kernel, 2),
        capacity_cpu_s: round(wall_s * os.availableParallelism(), 2),
      },
    };
  } finally {
    clearInterval(timer);
  }
}

/** Waits (at most maxWaitS) until processes not ours used under `maxOtherCores` cores over a window of
 *  windowS seconds; returns how long it waited and the last window's share (cores) of the others. */
export async function waitQuiet(
  roots: () => Map<string, number[]>,
  maxWaitS: number,
  maxOtherCores = 0.3,
  windowS = 3,
): Promise<{ waited_s: number; other_cores: number; quiet: boolean; ours_idle_cores: Record<string, number> }> {
  const t0 = performance.now();
  for (;;) {
    const r = roots();
    const t0w = procTable();
    const o0 = ourCpu(r, t0w);
    const w0 = performance.now();
    await new Promise((res) => setTimeout(res, windowS * 1000));
    const t1w = procTable();
    const o1 = ourCpu(r, t1w);
    const other = othersCpu(t0w, t1w, new Set([...o0.pids, ...o1.pids])).procs / ((performance.now() - w0) / 1000);
    const waited = (performance.now() - t0) / 1000;
    const idle = Object.fromEntries(
      Object.entries(o1.byName).map(([k, v]) => [
        k,
        round(Math.max(0, v - (o0.byName[k] ?? 0)) / ((performance.now() - w0) / 1000), 2),
      ]),
    );
    if (other < maxOtherCores || waited >= maxWaitS)
      return {
        waited_s: round(waited, 1),
        other_cores: round(other, 2),
        quiet: other < maxOtherCores,
        ours_idle_cores: idle,
      };
  }
}

export function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

export function median(xs: number[]): number {
  if (!xs.length) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

const ms = (e: Event) => Number(e.eventTime!.seconds) * 1000 + (e.eventTime!.nanos ?? 0) / 1e6;

/** Where one episode workflow's time went (milliseconds), from its history. */
export interface HistoryBreakdown {
  events: number;
  /** WorkflowExecutionStarted → WorkflowExecutionCompleted. */
  e2e_ms: number;
  activities: number;
  activity_types: Record<string, number>;
  /** Scheduled → started (waiting in the task queue for a worker slot / poll), summed over the episode. */
  activity_queue_ms: number;
  /** Started → completed: the worker's execution, as the server sees it. */
  activity_exec_ms: number;
  activity_exec_by_type_ms: Record<string, number>;
  workflow_tasks: number;
  /** Local activities' results, recorded as markers when their workflow task completes. */
  markers: number;
  wft_queue_ms: number;
  wft_proc_ms: number;
  /** Workflow tasks that timed out (a sticky task not picked up within the worker's 3 s sticky
   *  schedule-to-start timeout goes back to the shared queue; or a 4 s start-to-close), and the time from
   *  their scheduling to the timeout. Activity attempts that timed out or failed. */
  wft_timed_out: number;
  wft_timed_out_ms: number;
  wft_failed: number;
  activity_attempts_failed: number;
  /** e2e − the sums above: time between the recorded steps (e.g. an activity's completion to the next workflow task's scheduling). */
  other_ms: number;
}

export function breakdown(events: Event[]): HistoryBreakdown {
  const byId = new Map(events.map((e) => [Number(e.eventId), e]));
  const b: HistoryBreakdown = {
    events: events.length,
    e2e_ms: 0,
    activities: 0,
    activity_types: {},
    activity_queue_ms: 0,
    activity_exec_ms: 0,
    activity_exec_by_type_ms: {},
    workflow_tasks: 0,
    markers: 0,
    wft_queue_ms: 0,
    wft_proc_ms: 0,
    wft_timed_out: 0,
    wft_timed_out_ms: 0,
    wft_failed: 0,
    activity_attempts_failed: 0,
    other_ms: 0,
  };
  for (const e of events) {
    const a = e.activityTaskCompletedEventAttributes;
    if (a) {
      const sch = byId.get(Number(a.scheduledEventId))!;
      const st = byId.get(Number(a.startedEventId))!;
      const name = sch.activityTaskScheduledEventAttributes!.activityType!.name!;
      b.activities++;
      b.activity_types[name] = (b.activity_types[name] ?? 0) + 1;
      b.activity_queue_ms += ms(st) - ms(sch);
      b.activity_exec_ms += ms(e) - ms(st);
      b.activity_exec_by_type_ms[name] = (b.activity_exec_by_type_ms[name] ?? 0) + ms(e) - ms(st);
    }
    const to = e.workflowTaskTimedOutEventAttributes;
    if (to) {
      b.wft_timed_out++;
      b.wft_timed_out_ms += ms(e) - ms(byId.get(Number(to.scheduledEventId))!);
    }
    if (e.workflowTaskFailedEventAttributes) b.wft_failed++;
    if (e.markerRecordedEventAttributes) b.markers++;
    if (e.activityTaskTimedOutEventAttributes || e.activityTaskFailedEventAttributes) b.activity_attempts_failed++;
    const w = e.workflowTaskCompletedEventAttributes;
    if (w) {
      const sch = byId.get(Number(w.scheduledEventId))!;
      const st = byId.get(Number(w.startedEventId))!;
      b.workflow_tasks++;
      b.wft_queue_ms += ms(st) - ms(sch);
      b.wft_proc_ms += ms(e) - ms(st);
    }
  }
  const first = events[0];
  const last = events[events.length - 1];
  if (first && last) b.e2e_ms = ms(last) - ms(first);
  b.other_ms =
    b.e2e_ms - b.activity_queue_ms - b.activity_exec_ms - b.wft_queue_ms - b.wft_proc_ms - b.wft_timed_out_ms;
  return b;
}

/** Mean of each number over the breakdowns (counts and times), plus the totals of the counts. */
export function meanBreakdown(bs: HistoryBreakdown[]): Record<string, unknown> {
  const n = bs.length || 1;
  const keys = [
    'events',
    'e2e_ms',
    'activities',
    'activity_queue_ms',
    'activity_exec_ms',
    'workflow_tasks',
    'markers',
    'wft_queue_ms',
    'wft_proc_ms',
    'wft_timed_out',
    'wft_timed_out_ms',
    'wft_failed',
    'activity_attempts_failed',
    'other_ms',
  ] as const;
  const mean = Object.fromEntries(keys.map((k) => [k, round(bs.reduce((a, b) => a + b[k], 0) / n, 2)]));
  const types: Record<string, number> = {};
  const execByType: Record<string, number> = {};
  for (const b of bs) {
    for (const [k, v] of Object.entries(b.activity_types)) types[k] = (types[k] ?? 0) + v;
    for (const [k, v] of Object.entries(b.activity_exec_by_type_ms)) execByType[k] = (execByType[k] ?? 0) + v;
  }
  return {
    episodes: bs.length,
    per_episode_mean: mean,
    total_activities: bs.reduce((a, b) => a + b.activities, 0),
    total_workflow_tasks: bs.reduce((a, b) => a + b.workflow_tasks, 0),
    activity_types: types,
    activity_exec_mean_ms_by_type: Object.fromEntries(
      Object.entries(execByType).map(([k, v]) => [k, round(v / types[k]!, 2)]),
    ),
  };
}
