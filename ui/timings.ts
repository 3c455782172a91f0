// An episode's times from its history: when it started and closed, and for each turn's generate how
// long it waited for a worker and how long its last attempt ran (the engine's time plus the worker's).
import { defaultPayloadConverter } from '@temporalio/common';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { tsToMs } from '@temporalio/common/lib/time.js';

export interface TurnTiming {
  turn: number;
  /** From the first schedule to the start of the attempt that completed (retries included). */
  wait_ms: number | null;
  /** The completing attempt, from its start to its result. */
  run_ms: number | null;
}

export interface EpisodeTimings {
  started: string | null;
  closed: string | null;
  total_ms: number | null;
  turns: TurnTiming[];
}

type HistoryEvent = NonNullable<History['events']>[number];
const timeOf = (ev: HistoryEvent): number | null => (ev.eventTime ? tsToMs(ev.eventTime) : null);

function turnOf(input: unknown): number | null {
  const payload = (input as { payloads?: unknown[] } | null | undefined)?.payloads?.[0];
  if (!payload) return null;
  const turn = (defaultPayloadConverter.fromPayload(payload as never) as { turn?: unknown } | null)?.turn;
  return typeof turn === 'number' ? turn : null;
}

export function episodeTimings(history: History): EpisodeTimings {
  const events = history.events ?? [];
  const generates = new Map<string, { turn: number; scheduled: number | null; started: number | null }>();
  const turns: TurnTiming[] = [];
  let started: number | null = null;
  let closed: number | null = null;
  for (const ev of events) {
    if (ev.workflowExecutionStartedEventAttributes) started = timeOf(ev);
    const sched = ev.activityTaskScheduledEventAttributes;
    if (sched?.activityType?.name === 'generateTurn') {
      const turn = turnOf(sched.input);
      if (turn !== null) generates.set(String(ev.eventId), { turn, scheduled: timeOf(ev), started: null });
    }
    const begun = ev.activityTaskStartedEventAttributes;
    const g = begun ? generates.get(String(begun.scheduledEventId)) : undefined;
    if (g) g.started = timeOf(ev);
    const done = ev.activityTaskCompletedEventAttributes;
    const d = done ? generates.get(String(done.scheduledEventId)) : undefined;
    const end = timeOf(ev);
    if (d)
      turns.push({
        turn: d.turn,
        wait_ms: d.scheduled !== null && d.started !== null ? d.started - d.scheduled : null,
        run_ms: d.started !== null && end !== null ? end - d.started : null,
      });
    if (
      ev.workflowExecutionCompletedEventAttributes ||
      ev.workflowExecutionFailedEventAttributes ||
      ev.workflowExecutionTerminatedEventAttributes ||
      ev.workflowExecutionCanceledEventAttributes ||
      ev.workflowExecutionTimedOutEventAttributes
    )
      closed = end;
  }
  return {
    started: started === null ? null : new Date(started).toISOString(),
    closed: closed === null ? null : new Date(closed).toISOString(),
    total_ms: started !== null && closed !== null ? closed - started : null,
    turns,
  };
}
