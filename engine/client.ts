// The client of one vLLM engine (0.32 routes; docs/engines.md has the payloads). Every answer is
// validated; every failure is a typed EngineError naming this engine and the route.
import { randomUUID } from 'node:crypto';
import { EngineMalformedResponseError } from './errors.js';
import { EngineHttp } from './http.js';
import { engineMetricsFrom } from './metrics.js';
import {
  DetokenizeResponse,
  GenerateResponse,
  ModelsResponse,
  RenderResponse,
  ResetPrefixCacheResponse,
  TokenizeResponse,
  VersionResponse,
  logprobTokenId,
} from './schemas.js';
import type {
  EngineMetrics,
  GenerateInput,
  GenerateResult,
  RenderChatInput,
  RenderedPrompt,
  SamplingOptions,
} from './types.js';

export const ROUTES = {
  health: '/health',
  version: '/version',
  models: '/v1/models',
  metrics: '/metrics',
  renderChat: '/v1/chat/completions/render',
  tokenize: '/tokenize',
  detokenize: '/detokenize',
  generate: '/inference/v1/generate',
  pause: '/pause',
  resume: '/resume',
  isPaused: '/is_paused',
  resetPrefixCache: '/reset_prefix_cache',
  collectiveRpc: '/collective_rpc',
} as const;

export interface VllmClientOptions {
  url: string;
  /** Per-request timeout (generate can take long on CPU). */
  timeoutMs?: number;
}

export class VllmClient {
  readonly url: string;
  private readonly http: EngineHttp;

  constructor(opts: VllmClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
    this.http = new EngineHttp(this.url, opts.timeoutMs ?? 120_000);
  }

  async health(timeoutMs = 5_000): Promise<void> {
    await this.http.text('GET', ROUTES.health, undefined, { timeoutMs });
  }

  async isHealthy(timeoutMs = 5_000): Promise<boolean> {
    return this.health(timeoutMs).then(
      () => true,
      () => false,
    );
  }

  async version(): Promise<string> {
    return (await this.http.json('GET', ROUTES.version, VersionResponse)).version;
  }

  /** The served model name and its max model length. */
  async model(): Promise<{ id: string; maxModelLen: number | null }> {
    const first = (await this.http.json('GET', ROUTES.models, ModelsResponse)).data[0]!;
    return { id: first.id, maxModelLen: first.max_model_len ?? null };
  }

  async metrics(): Promise<EngineMetrics> {
    const text = await this.http.text('GET', ROUTES.metrics);
    const metrics = engineMetricsFrom(text);
    if (!metrics) throw new EngineMalformedResponseError(this.url, ROUTES.metrics, 'no vllm:* series');
    return metrics;
  }

  /** Chat template + image processing on the engine: prompt ids with expanded image placeholders, and features. */
  async renderChat(input: RenderChatInput): Promise<RenderedPrompt> {
    const body = {
      messages: input.messages,
      ...(input.tools?.length ? { tools: input.tools, tool_choice: 'none' } : {}),
      add_generation_prompt: input.addGenerationPrompt ?? true,
      continue_final_message: input.continueFinalMessage ?? false,
      ...(input.chatTemplateKwargs ? { chat_template_kwargs: input.chatTemplateKwargs } : {}),
      mm_payload: input.includeFeatures === false ? 'none' : 'tensors',
    };
    const res = await this.http.json('POST', ROUTES.renderChat, RenderResponse, body);
    const features = res.features ?? null;
    return {
      tokenIds: res.token_ids,
      features,
      imagePlaceholders: (features?.mm_placeholders.image ?? []).map(({ offset, length }) => ({ offset, length })),
    };
  }

  /** Chat template only (no image features); the same ids as renderChat for the same conversation. */
  async tokenizeChat(input: Pick<RenderChatInput, 'messages' | 'tools' | 'addGenerationPrompt'>): Promise<number[]> {
    const body = {
      messages: input.messages,
      ...(input.tools?.length ? { tools: input.tools } : {}),
      add_generation_prompt: input.addGenerationPrompt ?? true,
    };
    return (await this.http.json('POST', ROUTES.tokenize, TokenizeResponse, body)).tokens;
  }

  async tokenize(text: string, addSpecialTokens = false): Promise<number[]> {
    return (
      await this.http.json('POST', ROUTES.tokenize, TokenizeResponse, {
        prompt: text,
        add_special_tokens: addSpecialTokens,
      })
    ).tokens;
  }

  /** Text of token ids, special tokens included (the engine's tokenizer). */
  async detokenize(tokenIds: number[]): Promise<string> {
    return (await this.http.json('POST', ROUTES.detokenize, DetokenizeResponse, { tokens: tokenIds })).prompt;
  }

  /** Token in, token out: exactly one logprob per generated token, or a malformed-response error. */
  async generate(input: GenerateInput): Promise<GenerateResult> {
    const body = {
      request_id: input.requestId ?? `tempo-${randomUUID()}`,
      token_ids: input.tokenIds,
      ...(input.features ? { features: input.features } : {}),
      sampling_params: samplingParams(input.sampling),
      output_mode: 'tokens',
    };
    const headers = input.sessionId ? { 'x-session-id': input.sessionId } : undefined;
    const timeoutMs = Math.min(input.timeoutMs ?? Infinity, this.http.timeoutMs);
    const res = await this.http.json('POST', ROUTES.generate, GenerateResponse, body, {
      headers,
      signal: input.signal,
      timeoutMs,
    });
    return this.toResult(res, input.tokenIds);
  }

  /** False when blocks are still held by running requests (retry after they finish). */
  async resetPrefixCache(): Promise<boolean> {
    return (await this.http.json('POST', ROUTES.resetPrefixCache, ResetPrefixCacheResponse)).success;
  }

  private toResult(res: GenerateResponse, promptIds: number[]): GenerateResult {
    const choice = res.choices[0]!;
    const bad = (why: string) => new EngineMalformedResponseError(this.url, ROUTES.generate, why);
    // A missing list is a broken answer, not an empty generation.
    if (!Array.isArray(choice.token_ids)) throw bad('no token_ids in the choice');
    const tokenIds = choice.token_ids;
    const entries = Array.isArray(choice.logprobs) ? null : (choice.logprobs?.content ?? null);
    const logprobs = Array.isArray(choice.logprobs) ? choice.logprobs : (entries ?? []).map((e) => e.logprob);
    if (logprobs.length !== tokenIds.length) throw bad(`${tokenIds.length} tokens but ${logprobs.length} logprobs`);
    entries?.forEach((e, i) => {
      const id = logprobTokenId(e);
      if (id !== null && id !== tokenIds[i])
        throw bad(`logprob ${i} is for token ${id}, generated token is ${tokenIds[i]}`);
    });
    if (!choice.finish_reason) throw bad('no finish_reason');
    return {
      engine: this.url,
      tokenIds,
      logprobs,
      finishReason: choice.finish_reason,
      stopReason: choice.stop_reason ?? null,
      routedExperts: typeof choice.routed_experts === 'string' ? choice.routed_experts : null,
      weightVersions: choice.weight_versions ?? null,
      promptTokens: res.usage?.prompt_tokens ?? null,
      promptLogprobs: res.prompt_logprobs
        ? res.prompt_logprobs.map((pos, i) => (pos ? (pos[String(promptIds[i])]?.logprob ?? null) : null))
        : null,
    };
  }
}

export function samplingParams(s: SamplingOptions): Record<string, unknown> {
  return {
    max_tokens: s.maxTokens,
    temperature: s.temperature ?? 1.0,
    top_p: s.topP ?? 1.0,
    ...(s.topK !== undefined ? { top_k: s.topK } : {}),
    ...(s.seed !== undefined ? { seed: s.seed } : {}),
    ...(s.stop?.length ? { stop: s.stop } : {}),
    ...(s.stopTokenIds?.length ? { stop_token_ids: s.stopTokenIds } : {}),
    include_stop_str_in_output: s.includeStopStrInOutput ?? true,
    ...(s.promptLogprobs ? { prompt_logprobs: 0 } : {}),
    // 0: the logprob of the sampled token only.
    logprobs: 0,
  };
}
