// The audit view of an episode, rebuilt from its Temporal history (what each activity was asked
// and answered: turn text, token ids, finish reasons, engines) and the blob store (the sample).
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { decodeTimeoutType, defaultPayloadConverter } from '@temporalio/common';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { z } from 'zod';
import type { BlobStore } from '../stores/blobstore.js';
import { Sample } from '../lib/contract.js';
import { checkInvariants, maskedSpans } from '../lib/trajectory.js';
import { EPISODE_WORKFLOW_TYPE, episodeWorkflowId, parseEpisodeId, type EpisodeSummary } from '../protocol/episode.js';

export interface ActivityCall {
  type: string;
  /** undefined for a local activity: its marker records only the result. */
  input: unknown;
  result: unknown;
  /** Attempt that completed (or the last started), from the history. */
  attempt: number | null;
  /** Why the attempt before it ended, when it was retried: the failure's type (WorkerDied: its worker
   *  process died and a successor failed it over) or the timeout's (heartbeat, start_to_close…). */
  retried_after: string | null;
  outcome: 'completed' | 'failed' | 'timed_out' | 'canceled' | 'pending';
  /** Ran as a local activity (recorded as a marker when its workflow task completed). */
  local: boolean;
}

// The marker the SDK's core records for a finished local activity: `data` names it, `result` holds its result.
const LOCAL_ACTIVITY_MARKER = 'core_local_activity';
const LocalMarkerData = z.object({ activity_type: z.string(), attempt: z.number().nullish() });

type Failure = NonNullable<
  NonNullable<NonNullable<History['events']>[number]['activityTaskStartedEventAttributes']>['lastFailure']
>;
/** What ended an activity's attempt: a timeout's type, or the failure's type (else its message). */
export function activityFailureKind(f: Failure | null | undefined): string | null {
  if (!f) return null;
  const timeout = f.timeoutFailureInfo?.timeoutType;
  if (timeout !== undefined && timeout !== null)
    return `timeout: ${(decodeTimeoutType(timeout) ?? String(timeout)).toLowerCase()}`;
  const type = f.applicationFailureInfo?.type;
  // a plain Error says more by its message than by its type
  return (type && type !== 'Error' ? type : f.message) || type || 'failure';
}

export interface AuditedTurn {
  turn: number;
  text: string;
  generated_tokens: number;
  synthetic_eos: boolean;
  observation_tokens: number;
  observation: string | null;
  finish_reason: string;
  mean_logprob: number | null;
  engine: string;
  weight_version: number | null;
  generate_attempt: number | null;
  /** Why the attempt before ended, when the turn's generate was retried (ActivityCall.retried_after). */
  generate_retried_after: string | null;
  env_reason: string | null;
}

export interface EpisodeAudit {
  episode_id: string;
  workflow_id: string;
  workflow_status: 'running' | 'completed' | 'failed' | 'other';
  /** rollout.environment of the episode (its input's settings; null: no start event in the history). */
  environment: string | null;
  status: string | null;
  reward: number | null;
  truncated_reason: string | null;
  weight_version: number | null;
  sample_ref: string | null;
  prompt_len: number | null;
  image_tokens: unknown;
  generate_calls: number;
  turns: AuditedTurn[];
  invariants: {
    ok: boolean;
    lengths_equal: boolean;
    response_length: number;
    loss_mask_length: number;
    logprobs_length: number;
    mask_sum: number;
    masked_spans: number;
    problems: string[];
  } | null;
}

function decode(payloads: unknown): unknown {
  const list = (payloads as { payloads?: unknown[] } | null | undefined)?.payloads;
  if (!list || list.length === 0) return undefined;
  return defaultPayloadConverter.fromPayload(list[0] as never);
}

/** Every activity call of a history in schedule order (a local activity at its marker), with its
 *  decoded input and result. */
export function activityCalls(history: History): ActivityCall[] {
  const bySchedule = new Map<string, ActivityCall>();
  for (const ev of history.events ?? []) {
    const id = String(ev.eventId);
    const sched = ev.activityTaskScheduledEventAttributes;
    if (sched)
      bySchedule.set(id, {
        type: sched.activityType?.name ?? '?',
        input: decode(sched.input),
        result: undefined,
        attempt: null,
        retried_after: null,
        outcome: 'pending',
        local: false,
      });
    const marker = ev.markerRecordedEventAttributes;
    if (marker?.markerName === LOCAL_ACTIVITY_MARKER) {
      const data = LocalMarkerData.safeParse(decode(marker.details?.data));
      if (data.success) {
        const failed = Boolean(marker.failure);
        bySchedule.set(id, {
          type: data.data.activity_type,
          input: undefined,
          result: failed ? undefined : decode(marker.details?.result),
          attempt: data.data.attempt ?? null,
          retried_after: null,
          outcome: failed ? 'failed' : 'completed',
          local: true,
        });
      }
    }
    const started = ev.activityTaskStartedEventAttributes;
    if (started) {
      const c = bySchedule.get(String(started.scheduledEventId));
      if (c)
        Object.assign(c, { attempt: started.attempt ?? null, retried_after: activityFailureKind(started.lastFailure) });
    }
    const done = ev.activityTaskCompletedEventAttributes;
    if (done) {
      const c = bySchedule.get(String(done.scheduledEventId));
      if (c) Object.assign(c, { result: decode(done.result), outcome: 'completed' });
    }
    const failed =
      ev.activityTaskFailedEventAttributes ??
      ev.activityTaskTimedOutEventAttributes ??
      ev.activityTaskCanceledEventAttributes;
    if (failed) {
      const c = bySchedule.get(String(failed.scheduledEventId));
      if (c)
        c.outcome = ev.activityTaskFailedEventAttributes
          ? 'failed'
          : ev.activityTaskTimedOutEventAttributes
            ? 'timed_out'
            : 'canceled';
    }
  }
  return [...bySchedule.values()];
}

const GenIn = z.object({ turn: z.number() });
const GenOut = z.object({
  text: z.string(),
  generated_tokens: z.number(),
  mean_logprob: z.number().nullable(),
  synthetic_eos: z.boolean(),
  finish_reason: z.string(),
  engine: z.string(),
  weight_version: z.number().nullable(),
});
const EnvOut = z.object({ reason: z.string(), observation: z.string().nullable() });
const ObsIn = z.object({ observation: z.string() });
const RenderOut = z.object({
  prompt_len: z.number(),
  image_tokens: z.unknown(),
  conventions: z.object({ eos_ids: z.array(z.number()) }),
});

const StartIn = z.object({ settings: z.object({ environment: z.string() }) });

const ModelCallIn = z.object({
  call: z.number(),
  messages: z.array(z.object({ role: z.string(), content: z.unknown() })),
});

/** A Python environment's model calls (modelCall updates, workflows/python-episode.ts): what the
 *  environment answered before call k, as text (its messages, one a line with their role), by k. */
export function modelCallObservations(history: History): Map<number, string> {
  const out = new Map<number, string>();
  for (const ev of history.events ?? []) {
    const input = ev.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input;
    if (input?.name !== 'modelCall') continue;
    const req = ModelCallIn.safeParse(decode(input.args));
    if (!req.success || req.data.call === 0 || out.has(req.data.call)) continue;
    const text = (content: unknown) =>
      typeof content === 'string'
        ? content
        : Array.isArray(content)
          ? content.map((p) => (p as { text?: string }).text ?? '').join('')
          : '';
    out.set(req.data.call, req.data.messages.map((m) => `${m.role}: ${text(m.content)}`).join('\n'));
  }
  return out;
}

/** The environment an episode ran in, from its start event's input. */
export function episodeEnvironment(history: History): string | null {
  const started = history.events?.find(
    (ev) => ev.workflowExecutionStartedEventAttributes,
  )?.workflowExecutionStartedEventAttributes;
  const input = StartIn.safeParse(started ? decode(started.input) : undefined);
  return input.success ? input.data.settings.environment : null;
}

export function workflowResult(history: History): { status: EpisodeAudit['workflow_status']; result: unknown } {
  for (const ev of history.events ?? []) {
    if (ev.workflowExecutionCompletedEventAttributes)
      return { status: 'completed', result: decode(ev.workflowExecutionCompletedEventAttributes.result) };
    if (ev.workflowExecutionFailedEventAttributes) return { status: 'failed', result: null };
    if (
      ev.workflowExecutionTerminatedEventAttributes ||
      ev.workflowExecutionCanceledEventAttributes ||
      ev.workflowExecutionTimedOutEventAttributes
    )
      return { status: 'other', result: null };
  }
  return { status: 'running', result: null };
}

export async function auditFromHistory(episodeId: string, history: History, store: BlobStore): Promise<EpisodeAudit> {
  const calls = activityCalls(history);
  const { status: workflow_status, result } = workflowResult(history);
  const summary = (result ?? null) as EpisodeSummary | null;
  const render = calls.find((c) => c.type === 'renderPrompt' && c.outcome === 'completed');
  const rendered = render ? RenderOut.safeParse(render.result) : null;
  const sample = summary?.sample_ref ? Sample.parse(await store.getJson(summary.sample_ref)) : null;

  const turns: AuditedTurn[] = [];
  let lastEnv: z.infer<typeof EnvOut> | null = null;
  for (const c of calls) {
    if (c.type === 'generateTurn' && c.outcome === 'completed') {
      const out = GenOut.parse(c.result);
      turns.push({
        turn: GenIn.parse(c.input).turn,
        text: out.text,
        generated_tokens: out.generated_tokens,
        synthetic_eos: out.synthetic_eos,
        observation_tokens: 0,
        observation: null,
        finish_reason: out.finish_reason,
        mean_logprob: out.mean_logprob,
        engine: out.engine,
        weight_version: out.weight_version ?? summary?.weight_version ?? null,
        generate_attempt: c.attempt,
        generate_retried_after: c.retried_after,
        env_reason: null,
      });
    } else if ((c.type === 'envStep' || c.type === 'openenvStep') && c.outcome === 'completed' && turns.length > 0) {
      lastEnv = EnvOut.parse(c.result);
      turns[turns.length - 1]!.env_reason = lastEnv.reason;
    } else if (c.type === 'renderObservation' && turns.length > 0) {
      // A local activity's input is not in the history: the text rendered is the environment's observation.
      turns[turns.length - 1]!.observation = c.local ? (lastEnv?.observation ?? '') : ObsIn.parse(c.input).observation;
    }
  }
  const answered = modelCallObservations(history);
  turns.forEach((t, i) => {
    if (answered.has(i + 1)) t.observation = answered.get(i + 1)!;
  });
  if (sample) {
    sample.turns.forEach((t, i) => {
      const audited = turns[i];
      if (audited) audited.observation_tokens = t.observation_tokens;
    });
  }
  const inv = sample ? checkInvariants(sample) : null;
  return {
    episode_id: episodeId,
    workflow_id: episodeWorkflowId(episodeId),
    workflow_status,
    environment: sample?.environment ?? episodeEnvironment(history),
    status: summary?.status ?? null,
    reward: summary?.reward ?? null,
    truncated_reason: summary?.truncated_reason ?? null,
    weight_version: summary?.weight_version ?? null,
    sample_ref: summary?.sample_ref ?? null,
    prompt_len: rendered?.success ? rendered.data.prompt_len : null,
    image_tokens: rendered?.success ? rendered.data.image_tokens : null,
    generate_calls: calls.filter((c) => c.type === 'generateTurn').length,
    turns,
    invariants: inv && {
      ok: inv.ok,
      lengths_equal: inv.response_length === inv.loss_mask_length && inv.loss_mask_length === inv.logprobs_length,
      response_length: inv.response_length,
      loss_mask_length: inv.loss_mask_length,
      logprobs_length: inv.logprobs_length,
      mask_sum: inv.mask_sum,
      masked_spans: maskedSpans(sample!.loss_mask).length,
      problems: inv.problems,
    },
  };
}

const WORKFLOW_PREFIX = episodeWorkflowId('');

/** An episode id from either form a user may paste: `RUN/STEP/P/S` or its workflow id `episode/RUN/STEP/P/S`. */
export function normalizeEpisodeId(id: string): string {
  const bare = id.startsWith(WORKFLOW_PREFIX) ? id.slice(WORKFLOW_PREFIX.length) : id;
  // a run named "episode" keeps its prefix: strip only when what remains is itself an episode id
  try {
    if (bare !== id) parseEpisodeId(bare);
    return bare;
  } catch {
    return id;
  }
}

/** The history of an episode's workflow (an id as parseEpisodeId reads it); none is an EpisodeNotFound. */
export async function episodeHistory(client: Client, episodeId: string): Promise<History> {
  try {
    return await client.workflow.getHandle(episodeWorkflowId(episodeId)).fetchHistory();
  } catch (err) {
    // fetchHistory reports a missing workflow as gRPC NOT_FOUND (5), not as WorkflowNotFoundError
    if (err instanceof WorkflowNotFoundError || (err as { code?: unknown }).code === 5)
      throw new EpisodeNotFound(
        `no episode ${JSON.stringify(episodeId)} (no workflow ${episodeWorkflowId(episodeId)})`,
      );
    throw err;
  }
}

export class EpisodeNotFound extends Error {}

export async function auditEpisode(client: Client, store: BlobStore, episode: string): Promise<EpisodeAudit> {
  const episodeId = normalizeEpisodeId(episode);
  parseEpisodeId(episodeId);
  return auditFromHistory(episodeId, await episodeHistory(client, episodeId), store);
}

export interface EpisodeListEntry {
  episode_id: string;
  workflow_status: string;
  start_time: string | null;
  close_time: string | null;
  status: string | null;
  reward: number | null;
  response_len: number | null;
  turns: number | null;
}

/** The episodes of a run (optionally one step), by workflow id prefix `episode/<run>/[<step>/]`. */
export async function listEpisodes(client: Client, runId: string, step?: number): Promise<EpisodeListEntry[]> {
  const prefix = episodeWorkflowId(step === undefined ? `${runId}/` : `${runId}/${step}/`);
  const query = `WorkflowType = '${EPISODE_WORKFLOW_TYPE}' AND WorkflowId STARTS_WITH '${prefix.replace(/'/g, "\\'")}'`;
  const out: EpisodeListEntry[] = [];
  for await (const wf of client.workflow.list({ query })) {
    if (!wf.workflowId.startsWith(prefix)) continue;
    let summary: EpisodeSummary | null = null;
    if (wf.status.name === 'COMPLETED')
      summary = (await client.workflow.getHandle(wf.workflowId, wf.runId).result()) as EpisodeSummary;
    out.push({
      episode_id: wf.workflowId.slice('episode/'.length),
      workflow_status: wf.status.name,
      start_time: wf.startTime?.toISOString() ?? null,
      close_time: wf.closeTime?.toISOString() ?? null,
      status: summary?.status ?? null,
      reward: summary?.reward ?? null,
      response_len: summary?.response_len ?? null,
      turns: summary?.turns ?? null,
    });
  }
  return out.sort((a, b) => a.episode_id.localeCompare(b.episode_id, undefined, { numeric: true }));
}

/** The largest payload (bytes) anywhere in a history: the claim-check rule keeps it small. */
export function largestPayloadBytes(history: History): number {
  let max = 0;
  const walk = (v: unknown): void => {
    if (!v || typeof v !== 'object') return;
    if (Array.isArray(v)) return v.forEach(walk);
    const o = v as Record<string, unknown>;
    if (o.data instanceof Uint8Array && 'metadata' in o) max = Math.max(max, o.data.length);
    Object.values(o).forEach(walk);
  };
  walk(history.events);
  return max;
}
