// Adapter: the episode port (episode-engines.ts) over the vLLM engine pool of engine/. One pool
// per worker process, routed by engines.routing, health-checked in the background.
import type { TempoConfig } from '../config/schema.js';
import { engineUrls } from '../supervise/engines.js';
import { EngineHttpError, EnginePool, type GenerateResult, type MultiModalFeatures } from '../engine/index.js';
import {
  EngineRequestError,
  type EngineConventions,
  type EngineGenerated,
  type EpisodeEngines,
} from './episode-engines.js';

/** vLLM's label for the weights an engine was started with (the base model: weight version 0). */
const STARTUP_WEIGHTS_LABEL = 'default';

/** The weight version stamped on the generated tokens (every span must agree), 'unknown' when a label is not one. */
export function weightVersionOf(r: Pick<GenerateResult, 'weightVersions'>): number | 'unknown' | null {
  if (!r.weightVersions?.length) return null;
  const versions = new Set(
    r.weightVersions.map((w) =>
      w.version === STARTUP_WEIGHTS_LABEL ? 0 : /^\d+$/.test(w.version) ? Number(w.version) : Number.NaN,
    ),
  );
  const [only] = [...versions];
  return versions.size === 1 && Number.isInteger(only) ? only! : 'unknown';
}

// Single-token specials of the Qwen chat format. Placeholders and vision markers never belong on the response side.
const SPECIALS = {
  im_start: '<|im_start|>',
  im_end: '<|im_end|>',
  endoftext: '<|endoftext|>',
  image_pad: '<|image_pad|>',
  video_pad: '<|video_pad|>',
  vision_start: '<|vision_start|>',
  vision_end: '<|vision_end|>',
} as const;
const RESPONSE_FORBIDDEN = ['image_pad', 'video_pad', 'vision_start', 'vision_end'] as const;

function rejected(err: unknown): boolean {
  return (
    err instanceof EngineHttpError && err.status >= 400 && err.status < 500 && err.status !== 429 && err.status !== 408
  );
}

export function poolEpisodeEngines(pool: EnginePool): EpisodeEngines {
  let conventions: Promise<EngineConventions> | null = null;
  // A failed lookup rejects (and is not cached); only a tokenizer that really lacks the token gives null.
  const single = async (text: string): Promise<number | null> => {
    const ids = await pool.tokenize(text);
    return ids.length === 1 ? ids[0]! : null;
  };
  return {
    async render(req, opts) {
      const { messages, tools } = req;
      if (req.add_generation_prompt === false || messages.every((m) => typeof m.content === 'string')) {
        // text only: the tokenize route renders the same template without image processing
        const ids = await pool.tokenizeChat(
          { messages, tools, addGenerationPrompt: req.add_generation_prompt },
          opts.session_id,
        );
        return {
          engine: pool.pick(opts.session_id).url,
          token_ids: ids,
          features: null,
          image_placeholder_lengths: null,
        };
      }
      const r = await pool.renderChat(
        { messages, tools, addGenerationPrompt: req.add_generation_prompt },
        opts.session_id,
      );
      return {
        engine: pool.pick(opts.session_id).url,
        token_ids: r.tokenIds,
        features: r.features,
        image_placeholder_lengths: r.imagePlaceholders.map((p) => p.length),
      };
    },

    async generate(req): Promise<EngineGenerated> {
      try {
        const r = await pool.generate(
          req.session_id,
          {
            tokenIds: req.token_ids,
            features: (req.features ?? null) as MultiModalFeatures | null,
            sampling: {
              maxTokens: req.sampling.max_tokens,
              temperature: req.sampling.temperature,
              topP: req.sampling.top_p,
              seed: req.sampling.seed,
              stop: req.sampling.stop,
            },
            signal: req.signal,
            timeoutMs: req.timeout_ms,
          },
          { avoid: req.exclude_engines, onEngine: req.on_engine },
        );
        return {
          engine: r.engine,
          token_ids: r.tokenIds,
          logprobs: r.logprobs,
          finish_reason: r.finishReason,
          stop_reason: r.stopReason,
          routed_experts: r.routedExperts,
          weight_version: weightVersionOf(r),
        };
      } catch (err) {
        if (rejected(err))
          throw Object.assign(new EngineRequestError((err as Error).message), {
            engine: (err as EngineHttpError).engine,
          });
        throw err;
      }
    },

    detokenize: (ids) => (ids.length === 0 ? Promise.resolve('') : pool.detokenize(ids)),
    tokenize: (text) => pool.tokenize(text),

    tokenConventions() {
      conventions ??= (async () => {
        const names = Object.keys(SPECIALS) as Array<keyof typeof SPECIALS>;
        const found = await Promise.all(names.map((n) => single(SPECIALS[n])));
        const id = Object.fromEntries(names.map((n, i) => [n, found[i]!])) as Record<
          keyof typeof SPECIALS,
          number | null
        >;
        if (id.im_end === null)
          throw new Error('the engine tokenizer has no single <|im_end|> token (not a Qwen-format chat model?)');
        const known = (ids: Array<number | null>) => ids.filter((x): x is number => x !== null);
        return {
          eos_ids: known([id.im_end, id.endoftext]),
          end_of_turn_id: id.im_end,
          forbidden_response_ids: known(RESPONSE_FORBIDDEN.map((n) => id[n])),
          image_pad_id: id.image_pad,
          special_ids: known(found),
        };
      })();
      conventions.catch(() => (conventions = null));
      return conventions;
    },
  };
}

export function vllmEpisodeEngines(cfg: TempoConfig): EpisodeEngines {
  const urls = engineUrls(cfg);
  if (urls.length === 0) throw new Error('no engines: set engines.urls or start them with `tempo-rl engine start`');
  const pool = EnginePool.fromUrls(urls, {
    policy: cfg.engines.routing,
    cacheAware: { balanceThreshold: cfg.engines.balance_threshold },
    timeoutMs: cfg.engines.request_timeout_s * 1000,
    healthIntervalMs: cfg.engines.health_interval_s * 1000,
  }).start();
  return poolEpisodeEngines(pool);
}
