// Step "generate": token-in/token-out generation with the full canonical token history (prompt ids
// and the stitched trajectory so far, both from the blob store). The turn's tokens are stitched onto
// the trajectory here (activities/trajectory-store.ts); the history keeps the turn's text, counts and
// refs (the audit log), never the token arrays. The raw output also goes to the blob store.
// A dead, hung or stale engine is retried on another one: each attempt heartbeats the engine it sent
// the request to before sending it, so an attempt that times out still names it.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import type { BlobStore } from '../stores/blobstore.js';
import { childLogger } from '../base/log.js';
import { appendGenerated, idsForText } from '../lib/trajectory.js';
import type { GenerateTurnInput, GenerateTurnResult } from '../protocol/activities.js';
import { EngineRequestError, type EpisodeEngines } from './episode-engines.js';
import { loadStoredPrompt } from './render.js';
import { loadTrajectory, saveTrajectory } from './trajectory-store.js';

const log = childLogger('generate');

export interface GenerateDeps {
  store: BlobStore;
  engines: () => EpisodeEngines;
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

const Progress = z.object({
  failed_engines: z.array(z.string()).default([]),
  engine: z.string().nullable().default(null),
});

export function generateActivities(deps: GenerateDeps) {
  return {
    async generateTurn(input: GenerateTurnInput): Promise<GenerateTurnResult> {
      const ctx = Context.current();
      const attempt = ctx.info.attempt;
      const previous = Progress.safeParse(ctx.info.heartbeatDetails ?? {});
      const failed = previous.success ? [...previous.data.failed_engines] : [];
      if (previous.success && previous.data.engine && !failed.includes(previous.data.engine))
        failed.push(previous.data.engine);
      const prompt = await loadStoredPrompt(deps.store, input.prompt_ref);
      const stitched = await loadTrajectory(deps.store, input.trajectory_ref, {
        prompt_len: prompt.prompt_ids.length,
        limits: input.limits,
      });
      const engines = deps.engines();
      let chosen: string | null = null;
      const beatNow = () => ctx.heartbeat({ failed_engines: failed, engine: chosen });
      beatNow();
      const beat = setInterval(beatNow, 2000);
      let raw: unknown;
      try {
        raw = await engines.generate({
          session_id: input.episode_id,
          token_ids: [...prompt.prompt_ids, ...stitched.trajectory.response_ids],
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
        log.warn(
          { episode: input.episode_id, turn: input.turn, attempt, engine, err: (err as Error).message },
          'generate failed',
        );
        if (err instanceof EngineRequestError)
          throw ApplicationFailure.nonRetryable(err.message, 'EngineRequestRejected');
        throw err;
      } finally {
        clearInterval(beat);
      }
      const parsed = Generated.safeParse(raw);
      if (!parsed.success)
        throw ApplicationFailure.nonRetryable(
          `engine answer has the wrong shape: ${parsed.error.message}`,
          'InvalidEngineAnswer',
        );
      const out = parsed.data;
      if (out.finish_reason === 'abort' && input.regenerate_aborted) {
        log.info(
          { episode: input.episode_id, turn: input.turn, attempt, engine: out.engine },
          'request aborted by a weight sync: generated again',
        );
        throw ApplicationFailure.retryable(
          `engine ${out.engine} aborted the request (a weight sync with rollout.sync_in_flight abort); the turn is generated again`,
          'EngineAbortedForSync',
        );
      }
      const expected = input.expected_weight_version;
      const min = input.min_weight_version;
      const stale =
        out.weight_version !== null &&
        (expected !== undefined
          ? out.weight_version !== expected
          : min !== undefined && (out.weight_version === 'unknown' || out.weight_version < min));
      if (stale) {
        if (!failed.includes(out.engine)) failed.push(out.engine);
        ctx.heartbeat({ failed_engines: failed, engine: out.engine });
        log.warn(
          {
            episode: input.episode_id,
            turn: input.turn,
            attempt,
            engine: out.engine,
            weight_version: out.weight_version,
            expected,
          },
          'stale engine weights',
        );
        const wanted = expected !== undefined ? `${expected}` : `${min} or newer`;
        throw ApplicationFailure.retryable(
          `engine ${out.engine} generated with weight version ${out.weight_version}, the episode runs on ${wanted}`,
          'EngineWeightVersionMismatch',
        );
      }
      const conv = await engines.tokenConventions();
      const text = await engines.detokenize(idsForText(out.token_ids, conv.eos_ids));
      const stored: TurnOutput = {
        token_ids: out.token_ids,
        logprobs: out.logprobs,
        finish_reason: out.finish_reason,
        routed_experts: out.routed_experts,
      };
      const output_ref = await deps.store.putBytes(Buffer.from(JSON.stringify(stored)), 'json');
      const responseBefore = stitched.trajectory.response_ids.length;
      const stop = appendGenerated(stitched.trajectory, out, input.conventions);
      stitched.routed_experts.push(out.routed_experts);
      const span = stitched.trajectory.spans.at(-1);
      const accepted = stitched.trajectory.response_ids.length > responseBefore;
      const n = out.logprobs.length;
      return {
        ...(await saveTrajectory(deps.store, stitched, stop, input.conventions)),
        engine: out.engine,
        attempt,
        generated_tokens: out.token_ids.length,
        mean_logprob: n > 0 ? out.logprobs.reduce((a, b) => a + b, 0) / n : null,
        synthetic_eos: accepted && span?.synthetic_eos_at != null,
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
