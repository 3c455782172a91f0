// Kill points (docs/certification.md): a worker started with TEMPO_RL_KILL_AT SIGKILLs itself at a named
// point of its work — an activity's start, a moment into it, or its end before the result is reported;
// or a point the code names (the run's continue-as-new) — so that a certification run can die exactly
// where it means to. Each point fires once across every process that reads it: the first to reach it
// creates its `once` file, and the process started in place of the dead one finds it there.
// The trainer reads the same variable (workers/trainer/kill_points.py).
import { closeSync, openSync } from 'node:fs';
import { Context } from '@temporalio/activity';
import type { ActivityInterceptorsFactory } from '@temporalio/worker';
import { z } from 'zod';
import type { RolloutActivities } from '../protocol/activities.js';
import { readJsonRecord } from '../base/bounded-file.js';

export const KILL_AT_ENV = 'TEMPO_RL_KILL_AT';

// Every point a worker reaches, so that a misspelt one (which would never fire, and a certification
// would pass without its kill) is refused. The rollout worker's activities are checked against their
// interface by the compiler; the trainer's (workers/trainer/worker/activities.py) and the points the
// code names are listed.
const ROLLOUT_ACTIVITIES = {
  prepareDataset: true,
  prepareSftDataset: true,
  episodePrompts: true,
  episodeOutcomes: true,
  listEngines: true,
  recordStep: true,
  renderPrompt: true,
  renderObservation: true,
  generateTurn: true,
  envStep: true,
  scoreEpisode: true,
  storeSample: true,
  loadEpisodeSummary: true,
  renderSftBatch: true,
} satisfies Record<keyof RolloutActivities, true>;
const TRAINER_ACTIVITIES = ['train_step', 'sync_weights', 'log_metrics'];
/** continue_as_new: the rollout worker (workflows/training-run.ts); checkpoint_commit: the trainer. */
const NAMED_POINTS = ['continue_as_new', 'checkpoint_commit'];
export const KILL_POINT_NAMES: readonly string[] = [
  ...Object.keys(ROLLOUT_ACTIVITIES),
  ...TRAINER_ACTIVITIES,
  ...NAMED_POINTS,
];

export const KillPoint = z.strictObject({
  /** An activity type (generateTurn, train_step, …) or a point the code names (continue_as_new). */
  point: z.string().min(1),
  /** start: before the work; mid: after_ms into it; end: after the work, before its result is reported. */
  phase: z.enum(['start', 'mid', 'end']),
  after_ms: z.number().int().nonnegative().optional(),
  /** The nth time this process reaches the point (1: the first). */
  nth: z.number().int().positive().default(1),
  /** Only where the workflow id holds this text (eval episodes: "/eval/"). */
  match: z.string().optional(),
  /** Created when the point fires; a point whose file exists fires no more. */
  once: z.string().min(1),
  /** SIGKILL the process whose pid this JSON file names (its `pid` field: the Temporal server's record),
   *  not this one: a kill of the server at an exact point of the run. */
  pid_file: z.string().min(1).optional(),
});
export type KillPoint = z.infer<typeof KillPoint>;

/** The points of TEMPO_RL_KILL_AT (a JSON list); none when unset. A bad value stops the worker at start. */
export function killPointsFromEnv(env: NodeJS.ProcessEnv = process.env): KillPoint[] {
  const raw = env[KILL_AT_ENV];
  if (!raw) return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new Error(`${KILL_AT_ENV} is not JSON: ${raw.slice(0, 200)}`);
  }
  const points = z.array(KillPoint).safeParse(parsed);
  if (!points.success) throw new Error(`${KILL_AT_ENV} ${raw.slice(0, 200)}: ${z.prettifyError(points.error)}`);
  for (const p of points.data) {
    if (p.phase === 'mid' && p.after_ms === undefined)
      throw new Error(`${KILL_AT_ENV}: point ${p.point} phase mid needs after_ms`);
    if (!KILL_POINT_NAMES.includes(p.point))
      throw new Error(
        `${KILL_AT_ENV}: point ${JSON.stringify(p.point)} is reached by no worker, so it would never fire (points: ${KILL_POINT_NAMES.join(', ')})`,
      );
  }
  return points.data;
}

/** Claims the point: true for the one process that gets to fire it. */
function claim(p: KillPoint): boolean {
  try {
    closeSync(openSync(p.once, 'wx'));
    return true;
  } catch {
    return false;
  }
}

function die(p: KillPoint): void {
  if (!claim(p)) return;
  const pid = p.pid_file ? Number((readJsonRecord(p.pid_file) as { pid?: unknown }).pid) : process.pid;
  process.stderr.write(`kill point ${p.point} ${p.phase} (#${p.nth}): SIGKILL of process ${pid}\n`);
  process.kill(pid, 'SIGKILL');
}

export class KillPoints {
  private readonly seen = new Map<KillPoint, number>();

  constructor(readonly points: KillPoint[]) {}

  /** The points of `name` in this phase whose turn it is (counting this arrival). */
  private due(name: string, workflowId: string): KillPoint[] {
    return this.points.filter((p) => {
      if (p.point !== name || (p.match !== undefined && !workflowId.includes(p.match))) return false;
      const n = (this.seen.get(p) ?? 0) + 1;
      this.seen.set(p, n);
      return n === p.nth;
    });
  }

  /** A point the code names (no activity around it): start and end are the same moment. */
  reach(name: string, workflowId = ''): void {
    for (const p of this.due(name, workflowId)) die(p);
  }

  interceptor(): ActivityInterceptorsFactory {
    return () => ({
      inbound: {
        execute: async (input, next) => {
          const info = Context.current().info;
          const due = this.due(info.activityType, info.workflowExecution?.workflowId ?? '');
          for (const p of due) if (p.phase === 'start') die(p);
          const timers = due.filter((p) => p.phase === 'mid').map((p) => setTimeout(() => die(p), p.after_ms));
          try {
            const out = await next(input);
            for (const p of due) if (p.phase === 'end') die(p);
            return out;
          } finally {
            for (const t of timers) clearTimeout(t);
          }
        },
      },
    });
  }
}
