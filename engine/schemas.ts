// zod schemas of the vLLM HTTP payloads tempo-rl reads (vLLM 0.32; see docs/engines.md). Objects are
// loose: vLLM adds fields between versions and we keep what we do not read, so a rendered request can
// be passed on unchanged.
import { z } from 'zod';

const tokenId = z.number().int().nonnegative();

export const PlaceholderRange = z.looseObject({
  offset: z.number().int().nonnegative(),
  length: z.number().int().positive(),
});

/**
 * Multimodal features of a rendered prompt: per modality, item hashes, placeholder ranges in the token
 * ids, and the processed tensors (base64 `MultiModalKwargsItem`s) that /inference/v1/generate consumes.
 */
export const MultiModalFeatures = z.looseObject({
  mm_hashes: z.record(z.string(), z.array(z.string())),
  mm_placeholders: z.record(z.string(), z.array(PlaceholderRange)),
  kwargs_data: z.record(z.string(), z.array(z.string().nullable())).nullish(),
  mm_metadata: z.record(z.string(), z.array(z.string().nullable())).nullish(),
});
export type MultiModalFeatures = z.infer<typeof MultiModalFeatures>;

/** POST /v1/chat/completions/render answers with a ready GenerateRequest. */
export const RenderResponse = z.looseObject({
  request_id: z.string().optional(),
  token_ids: z.array(tokenId).min(1),
  features: MultiModalFeatures.nullish(),
  sampling_params: z.record(z.string(), z.unknown()).nullish(),
  model: z.string().nullish(),
});
export type RenderResponse = z.infer<typeof RenderResponse>;

export const TokenizeResponse = z.looseObject({
  count: z.number().int().nonnegative(),
  max_model_len: z.number().int().positive(),
  tokens: z.array(tokenId),
  token_strs: z.array(z.string()).nullish(),
});

// vLLM ≥ 0.20-ish: {token_id, logprob}. Earlier token-in/token-out servers returned the OpenAI chat
// shape with the id folded into the token string ("token_id:123") when return_tokens_as_token_ids.
const LogprobEntryWithId = z.looseObject({ token_id: tokenId, logprob: z.number() });
const LogprobEntryOpenAi = z.looseObject({ token: z.string(), logprob: z.number() });
export const LogprobEntry = z.union([LogprobEntryWithId, LogprobEntryOpenAi]);

export const GenerateChoice = z.looseObject({
  index: z.number().int(),
  finish_reason: z.string().nullish(),
  stop_reason: z.union([z.number(), z.string()]).nullish(),
  token_ids: z.array(tokenId).nullish(),
  logprobs: z.union([z.looseObject({ content: z.array(LogprobEntry).nullish() }), z.array(z.number())]).nullish(),
  routed_experts: z.unknown().optional(),
  weight_versions: z.array(z.looseObject({ version: z.string(), start: z.number(), end: z.number() })).nullish(),
});

export const GenerateResponse = z.looseObject({
  request_id: z.string().optional(),
  choices: z.array(GenerateChoice).min(1),
  prompt_logprobs: z.array(z.record(z.string(), z.looseObject({ logprob: z.number() })).nullable()).nullish(),
  usage: z.looseObject({ prompt_tokens: z.number().int(), completion_tokens: z.number().int().nullish() }).nullish(),
});
export type GenerateResponse = z.infer<typeof GenerateResponse>;

export const DetokenizeResponse = z.looseObject({ prompt: z.string() });
export const VersionResponse = z.looseObject({ version: z.string() });
export const ResetPrefixCacheResponse = z.looseObject({ success: z.boolean() });
export const ModelsResponse = z.looseObject({
  data: z.array(z.looseObject({ id: z.string(), max_model_len: z.number().int().nullish() })).min(1),
});
export const OpenApiResponse = z.looseObject({ paths: z.record(z.string(), z.unknown()) });
export const ServerInfoResponse = z.looseObject({ vllm_config: z.unknown() });

/** The id of one logprob entry, whichever shape the engine used. */
export function logprobTokenId(entry: z.infer<typeof LogprobEntry>): number | null {
  if ('token_id' in entry && typeof entry.token_id === 'number') return entry.token_id;
  const m = /^token_id:(\d+)$/.exec((entry as { token: string }).token);
  return m ? Number(m[1]) : null;
}

/** An OpenAI-style function tool, as a dataset or SFT file gives it (extra keys kept). */
export const ToolSpecSchema = z.looseObject({
  type: z.literal('function'),
  function: z.looseObject({
    name: z.string().min(1),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()),
  }),
});
