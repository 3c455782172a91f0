// Step "generate": token-in/token-out generation with the full canonical token history (prompt ids
// from the blob store + the response so far). Returns one turn's tokens, logprobs and text (small,
// kept in the history as the audit log); the raw output also goes to the blob store for the sample.
// A dead, hung or stale engine is retried on another one: each attempt heartbeats the engine it sent
// the request to before sending it, so an attempt that times out still names it.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import type { BlobStore } from '../lib/blobstore.js';
import { childLogger } from '../lib/log.js';
import { idsForText } from '../lib/trajectory.js';
import { EngineRequestError, type EpisodeEngines, type SamplingSettings } from './episode-engines.js';
import { loadStoredPrompt } from './render.js';

const log = childLogger('generate');

export interface GenerateDeps {
  store: BlobStore;
  engines: () => EpisodeEngines;
}

export interface GenerateTurnInput {
  episode_id: string;
  turn: number;
  prompt_ref: string;
  /** The response side so far, exactly as stitched by the workflow. */
  response_ids: number[];
  sampling: SamplingSettings;
  /** The weights the episode runs on; a generation stamped with other weights is retried elsewhere. */
  expected_weight_version?: number;
  /** The async window (rollout.max_staleness > 0): the engines move on while the episode runs, so any
   *  weights at least this new are accepted; older ones (an engine a sync missed) are retried elsewhere. */
  min_weight_version?: number;
  /** rollout.sync_in_flight abort: a request the engine aborted (a weight sync) is generated again. */
  regenerate_aborted?: boolean;
}

export interface GenerateTurnResult {
  engine: string;
  attempt: number;
  token_ids: number[];
  logprobs: number[];
  finish_reason: string;
  stop_reason: string | number | null;
  /** What the environment reads: the tokens' text without the trailing EOS (the ids stay exact). */
  text: string;
  /** Blob with {token_ids, logprobs, routed_experts} of this turn. */
  output_ref: string;
  /** The engine's weight version; null when the engine reports none (the turn is recorded as unknown). */
  weight_version: number | null;
  has_routed_experts: boolean;
}

export const TurnOutput = z.object({
  token_ids: z.array(z.number()),
  logprobs: z.array(z.number()),
  finish_reason: z.string(),
  routed_experts: z.string().nullable(),
});
export type TurnOutput = z.infer<typeof TurnOutput>;

// Structural check of what the port returned; the semantic checks (counts, budget) are the
// workflow's, so that a bad answer becomes a FAILED episode rather than a retry loop.
const Generated = z.object({
  engine: z.string(),
  token_ids: z.array(z.number()),
  logprobs: z.array(z.number()),
  finish_reason: z.string(),
  stop_reason: z.union([z.string(), z.number()]).nullable(),
  routed_experts: z.string().nullable(),
  weight_version: z.union([z.number().int(), z.literal('unknown')]).nullable(),
});

/** Room left for the activity to record a timed-out engine before its start-to-close timeout fires. */
function requestTimeoutMs(startToCloseMs: number): number {
  return Math.max(1_000, startToCloseMs - Math.min(10_000, startToCloseMs * 0.1));
}

const Progress = z.object({ failed_engines: z.array(z.string()).default([]), engine: z.string().nullable().default(null) });

export function generateActivities(deps: GenerateDeps) {
  return {
    async generateTurn(input: GenerateTurnInput): Promise<GenerateTurnResult> {
      const ctx = Context.current();
      const attempt = ctx.info.attempt;
      const previous = Progress.safeParse(ctx.info.heartbeatDetails ?? {});
      const failed = previous.success ? [...previous.data.failed_engines] : [];
      if (previous.success && previous.data.engine && !failed.includes(previous.data.engine)) failed.push(previous.data.engine);
      const prompt = await loadStoredPrompt(deps.store, input.prompt_ref);
      const engines = deps.engines();
      let chosen: string | null = null;
      const beatNow = () => ctx.heartbeat({ failed_engines: failed, engine: chosen });
      beatNow();
      const beat = setInterval(beatNow, 2000);
      let raw: unknown;
      try {
        raw = await engines.generate({
          session_id: input.episode_id,
          token_ids: [...prompt.prompt_ids, ...input.response_ids],
          features: prompt.features,
          sampling: input.sampling,
          exclude_engines: failed,
          on_engine: (url) => {
            chosen = url;
            beatNow();
          },
          signal: ctx.cancellationSignal,
          timeout_ms: requestTimeoutMs(ctx.info.startToCloseTimeoutMs),
        });
      } catch (err) {
        const engine = (err as { engine?: unknown }).engine;
        if (typeof engine === 'string') {
          if (!failed.includes(engine)) failed.push(engine);
          ctx.heartbeat({ failed_engines: failed, engine });
        }
        log.warn({ episode: input.episode_id, turn: input.turn, attempt, engine, err: (err as Error).message }, 'generate failed');
        if (err instanceof EngineRequestError) throw ApplicationFailure.nonRetryable(err.message, 'EngineRequestRejected');
        throw err;
      } finally {
        clearInterval(beat);
      }
      const parsed = Generated.safeParse(raw);
      if (!parsed.success) throw ApplicationFailure.nonRetryable(`engine answer has the wrong shape: ${parsed.error.message}`, 'InvalidEngineAnswer');
      const out = parsed.data;
      if (out.finish_reason === 'abort' && input.regenerate_aborted) {
        log.info({ episode: input.episode_id, turn: input.turn, attempt, engine: out.engine }, 'request aborted by a weight sync: generated again');
        throw ApplicationFailure.retryable(`engine ${out.engine} aborted the request (a weight sync with rollout.sync_in_flight abort); the turn is generated again`, 'EngineAbortedForSync');
      }
      const expected = input.expected_weight_version;
      const min = input.min_weight_version;
      const stale = out.weight_version !== null && (expected !== undefined ? out.weight_version !== expected : min !== undefined && (out.weight_version === 'unknown' || out.weight_version < min));
      if (stale) {
        if (!failed.includes(out.engine)) failed.push(out.engine);
        ctx.heartbeat({ failed_engines: failed, engine: out.engine });
        log.warn({ episode: input.episode_id, turn: input.turn, attempt, engine: out.engine, weight_version: out.weight_version, expected }, 'stale engine weights');
        const wanted = expected !== undefined ? `${expected}` : `${min} or newer`;
        throw ApplicationFailure.retryable(`engine ${out.engine} generated with weight version ${out.weight_version}, the episode runs on ${wanted}`, 'EngineWeightVersionMismatch');
      }
      const conv = await engines.tokenConventions();
      const text = await engines.detokenize(idsForText(out.token_ids, conv.eos_ids));
      const stored: TurnOutput = { token_ids: out.token_ids, logprobs: out.logprobs, finish_reason: out.finish_reason, routed_experts: out.routed_experts };
      const output_ref = await deps.store.putBytes(Buffer.from(JSON.stringify(stored)), 'json');
      return {
        engine: out.engine,
        attempt,
        token_ids: out.token_ids,
        logprobs: out.logprobs,
        finish_reason: out.finish_reason,
        stop_reason: out.stop_reason,
        text,
        output_ref,
        weight_version: out.weight_version === 'unknown' ? null : out.weight_version,
        has_routed_experts: out.routed_experts !== null,
      };
    },
  };
}
