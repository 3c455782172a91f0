// A turn's generate that was retried, from the episode's history: what ended the attempt before the
// one that completed, and what differs between the two. The history keeps only the completing
// attempt's start (its worker, its attempt number, the previous attempt's failure) and its result;
// a failure that timed out carries the heartbeat the attempt last sent (the engine it was waiting on,
// activities/generate.ts), and a worker's death names its process (rollout/worker.ts).
import { defaultPayloadConverter } from '@temporalio/common';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { tsToMs } from '@temporalio/common/lib/time.js';
import { activityFailureKind } from '../client/audit.js';

export interface AttemptFacts {
  attempt: number;
  /** pid@host of the worker that ran it (the Temporal SDK's identity), when the history tells. */
  worker: string | null;
  engine: string | null;
  weight_version: number | null;
  /** How it ended: completed, or the failure's type (WorkerDied, timeout: heartbeat…). */
  outcome: string;
  message: string | null;
}

export interface TurnRetry {
  turn: number;
  failed: AttemptFacts;
  completed: AttemptFacts;
  /** The facts that differ between the two attempts (worker, engine, weight_version). */
  changed: string[];
  /** From the first schedule to the completing attempt's start (the failed attempts and the backoff). */
  lost_ms: number | null;
}

type HistoryEvent = NonNullable<History['events']>[number];
type Payloads = { payloads?: unknown[] | null } | null | undefined;

function decoded(p: Payloads): unknown {
  const first = p?.payloads?.[0];
  return first ? defaultPayloadConverter.fromPayload(first as never) : undefined;
}

const timeOf = (ev: HistoryEvent): number | null => (ev.eventTime ? tsToMs(ev.eventTime) : null);

/** The process a WorkerDied failure names ("worker process 2202 on vm died …"), as an SDK identity. */
function deadWorker(message: string | null): string | null {
  const m = message ? /worker process (\d+) on (\S+)/.exec(message) : null;
  return m ? `${m[1]}@${m[2]}` : null;
}

function failedAttempt(ev: HistoryEvent, attempt: number): AttemptFacts {
  const f = ev.activityTaskStartedEventAttributes?.lastFailure;
  const beat = decoded(f?.timeoutFailureInfo?.lastHeartbeatDetails as Payloads) as { engine?: unknown } | undefined;
  const message = f?.message || null;
  return {
    attempt: attempt - 1,
    worker: deadWorker(message),
    engine: typeof beat?.engine === 'string' ? beat.engine : null,
    weight_version: null,
    outcome: activityFailureKind(f) ?? 'failure',
    message,
  };
}

export function turnRetries(history: History): TurnRetry[] {
  const scheduled = new Map<string, { turn: number; at: number | null; start?: HistoryEvent }>();
  const out: TurnRetry[] = [];
  for (const ev of history.events ?? []) {
    const sched = ev.activityTaskScheduledEventAttributes;
    if (sched?.activityType?.name === 'generateTurn') {
      const turn = (decoded(sched.input as Payloads) as { turn?: unknown } | undefined)?.turn;
      if (typeof turn === 'number') scheduled.set(String(ev.eventId), { turn, at: timeOf(ev) });
    }
    const begun = ev.activityTaskStartedEventAttributes;
    const s = begun ? scheduled.get(String(begun.scheduledEventId)) : undefined;
    if (s) s.start = ev;
    const done = ev.activityTaskCompletedEventAttributes;
    const d = done ? scheduled.get(String(done.scheduledEventId)) : undefined;
    const attempt = d?.start?.activityTaskStartedEventAttributes?.attempt ?? 1;
    if (!d?.start || attempt < 2) continue;
    const result = decoded(done!.result as Payloads) as { engine?: string; weight_version?: number | null } | undefined;
    const failed = failedAttempt(d.start, attempt);
    const completed: AttemptFacts = {
      attempt,
      worker: d.start.activityTaskStartedEventAttributes?.identity || null,
      engine: result?.engine ?? null,
      weight_version: result?.weight_version ?? null,
      outcome: 'completed',
      message: null,
    };
    const started = timeOf(d.start);
    out.push({
      turn: d.turn,
      failed,
      completed,
      changed: (['worker', 'engine'] as const).filter(
        (k) => failed[k] !== null && completed[k] !== null && failed[k] !== completed[k],
      ),
      lost_ms: d.at !== null && started !== null ? started - d.at : null,
    });
  }
  return out;
}
