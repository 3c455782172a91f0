// Adapter: the episode port (episode-engines.ts) over the vLLM engine pool of lib/vllm. One pool
// per worker process, routed by episode id (consistent hash), health-checked in the background.
import type { TempoConfig } from '../config/schema.js';
import { engineUrls } from '../lib/engines.js';
import { EngineHttpError, EnginePool, type ChatMessage, type GenerateResult, type MultiModalFeatures, type ToolSpec } from '../lib/vllm/index.js';
import type { TokenConventions } from '../lib/trajectory.js';
import { EngineRequestError, type EngineGenerated, type EpisodeEngines } from './episode-engines.js';

/** The weight version stamped on the last generated token, as a number when it is one. */
function weightVersionOf(r: GenerateResult): number | null {
  const last = r.weightVersions?.[r.weightVersions.length - 1]?.version;
  const n = last === undefined ? Number.NaN : Number(last);
  return Number.isInteger(n) ? n : null;
}

function rejected(err: unknown): boolean {
  return err instanceof EngineHttpError && err.status >= 400 && err.status < 500 && err.status !== 429 && err.status !== 408;
}

export function poolEpisodeEngines(pool: EnginePool): EpisodeEngines {
  let conventions: Promise<TokenConventions & { image_pad_id: number | null }> | null = null;
  const single = async (text: string): Promise<number | null> => {
    const ids = await pool.call(undefined, (e) => (e as unknown as { tokenize(t: string): Promise<number[]> }).tokenize(text), { idempotent: true }).catch(() => null);
    return ids && ids.length === 1 ? ids[0]! : null;
  };
  return {
    async render(req, opts) {
      const messages = req.messages as ChatMessage[];
      const tools = req.tools as ToolSpec[];
      if (req.add_generation_prompt === false || messages.every((m) => typeof m.content === 'string')) {
        // text only: the tokenize route renders the same template without image processing
        const ids = await pool.tokenizeChat({ messages, tools, addGenerationPrompt: req.add_generation_prompt }, opts.session_id);
        return { engine: pool.pick(opts.session_id).url, token_ids: ids, features: null, image_placeholder_lengths: null };
      }
      const r = await pool.renderChat({ messages, tools, addGenerationPrompt: req.add_generation_prompt }, opts.session_id);
      return { engine: pool.pick(opts.session_id).url, token_ids: r.tokenIds, features: r.features, image_placeholder_lengths: r.imagePlaceholders.map((p) => p.length) };
    },

    async generate(req): Promise<EngineGenerated> {
      try {
        const r = await pool.generate(
          req.session_id,
          {
            tokenIds: req.token_ids,
            features: (req.features ?? null) as MultiModalFeatures | null,
            sampling: { maxTokens: req.sampling.max_tokens, temperature: req.sampling.temperature, topP: req.sampling.top_p, seed: req.sampling.seed, stop: req.sampling.stop, allowedTokenIds: req.sampling.allowed_token_ids },
          },
          { avoid: req.exclude_engines },
        );
        return { engine: r.engine, token_ids: r.tokenIds, logprobs: r.logprobs, finish_reason: r.finishReason, stop_reason: r.stopReason, routed_experts: r.routedExperts, weight_version: weightVersionOf(r) };
      } catch (err) {
        if (rejected(err)) throw Object.assign(new EngineRequestError((err as Error).message), { engine: (err as EngineHttpError).engine });
        throw err;
      }
    },

    detokenize: (ids) => (ids.length === 0 ? Promise.resolve('') : pool.detokenize(ids)),

    tokenConventions() {
      conventions ??= (async () => {
        const [imEnd, endOfText, imagePad] = await Promise.all([single('<|im_end|>'), single('<|endoftext|>'), single('<|image_pad|>')]);
        if (imEnd === null) throw new Error('the engine tokenizer has no single <|im_end|> token (not a Qwen-format chat model?)');
        return { eos_ids: [imEnd, ...(endOfText === null ? [] : [endOfText])], end_of_turn_id: imEnd, image_pad_id: imagePad };
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
    timeoutMs: cfg.engines.request_timeout_s * 1000,
    healthIntervalMs: cfg.engines.health_interval_s * 1000,
  }).start();
  return poolEpisodeEngines(pool);
}
