// Step "generate": token-in/token-out generation with the full canonical token history (prompt ids
// from the blob store + the response so far). Returns one turn's tokens, logprobs and text (small,
// kept in the history as the audit log); the raw output also goes to the blob store for the sample.
// A dead engine is retried on another one: each attempt heartbeats the engines it saw fail.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import type { LocalBlobStore } from '../lib/blobstore.js';
import { childLogger } from '../lib/log.js';
import { EngineRequestError, type EpisodeEngines, type SamplingSettings } from './episode-engines.js';
import { loadStoredPrompt } from './render.js';

const log = childLogger('generate');

export interface GenerateDeps {
  store: LocalBlobStore;
  engines: () => EpisodeEngines;
}

export interface GenerateTurnInput {
  episode_id: string;
  turn: number;
  prompt_ref: string;
  /** The response side so far, exactly as stitched by the workflow. */
  response_ids: number[];
  sampling: SamplingSettings;
}

export interface GenerateTurnResult {
  engine: string;
  attempt: number;
  token_ids: number[];
  logprobs: number[];
  finish_reason: string;
  stop_reason: string | number | null;
  text: string;
  /** Blob with {token_ids, logprobs, routed_experts} of this turn. */
  output_ref: string;
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
  weight_version: z.number().int().nullable(),
});

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
      ctx.heartbeat({ failed_engines: failed, engine: null });
      const beat = setInterval(() => ctx.heartbeat({ failed_engines: failed, engine: null }), 2000);
      let raw: unknown;
      try {
        raw = await engines.generate({
          session_id: input.episode_id,
          token_ids: [...prompt.prompt_ids, ...input.response_ids],
          features: prompt.features,
          sampling: input.sampling,
          exclude_engines: failed,
        });
      } catch (err) {
        const engine = (err as { engine?: unknown }).engine;
        if (typeof engine === 'string') {
          failed.push(engine);
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
      const text = await engines.detokenize(out.token_ids);
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
        weight_version: out.weight_version,
        has_routed_experts: out.routed_experts !== null,
      };
    },
  };
}
