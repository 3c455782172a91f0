// What callers hand the vLLM client and get back: camelCase, engine-independent, validated.
import type { MultiModalFeatures } from './schemas.js';

export type ContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export interface ToolCall {
  /** vLLM requires one (any string). */
  id: string;
  type?: 'function';
  function: { name: string; arguments: string | Record<string, unknown> };
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | ContentPart[] | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

export interface ToolSpec {
  type: 'function';
  function: { name: string; description?: string; parameters: Record<string, unknown> };
}

export interface RenderChatInput {
  messages: ChatMessage[];
  tools?: ToolSpec[];
  /** Appends `<|im_start|>assistant\n` (default true). */
  addGenerationPrompt?: boolean;
  continueFinalMessage?: boolean;
  chatTemplateKwargs?: Record<string, unknown>;
  /** Whether the answer carries the processed image tensors (default true; false: hashes and placeholders only). */
  includeFeatures?: boolean;
}

export interface PlaceholderRange {
  offset: number;
  length: number;
}

export interface RenderedPrompt {
  /** Prompt token ids, image placeholders already expanded (one `<|image_pad|>` per merged patch). */
  tokenIds: number[];
  /** Pass unchanged to generate with any token ids that start with `tokenIds`. Null: text only. */
  features: MultiModalFeatures | null;
  /** Where the images' placeholder tokens are, in order. */
  imagePlaceholders: PlaceholderRange[];
}

export interface SamplingOptions {
  maxTokens: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  seed?: number;
  /** Stop strings (need detokenization on the engine, which our engines do). */
  stop?: string[];
  stopTokenIds?: number[];
  includeStopStrInOutput?: boolean;
  /** Also score the prompt: GenerateResult.promptLogprobs (slow; for checks, not rollouts). */
  promptLogprobs?: boolean;
}

export interface GenerateInput {
  /** The full canonical token history (prompt + every turn so far). */
  tokenIds: number[];
  /** The render's features, when the prompt has images. */
  features?: MultiModalFeatures | null;
  sampling: SamplingOptions;
  /** Sent as `x-session-id` (the episode id). */
  sessionId?: string;
  requestId?: string;
  /** Aborts the HTTP request (the activity's cancellation): an abandoned generate must not keep loading the engine. */
  signal?: AbortSignal;
  /** Per-call timeout; the client's own timeout still bounds it. */
  timeoutMs?: number;
}

export interface GenerateResult {
  engine: string;
  tokenIds: number[];
  /** One per generated token: the processed (post-temperature) logprob of the sampled token. */
  logprobs: number[];
  finishReason: string;
  stopReason: number | string | null;
  /** Base64 `.npy` of the routed experts (MoE models with routed-expert return on), else null. */
  routedExperts: string | null;
  weightVersions: Array<{ version: string; start: number; end: number }> | null;
  promptTokens: number | null;
  /** With sampling.promptLogprobs: the logprob of each prompt token given the ones before (first: null). */
  promptLogprobs: Array<number | null> | null;
}

export interface EngineMetrics {
  prefixCacheHits: number;
  prefixCacheQueries: number;
  running: number;
  waiting: number;
  promptTokens: number;
  generationTokens: number;
}

export interface Capabilities {
  engine: string;
  ok: boolean;
  version: string | null;
  missing: Array<{ route: string; enable: string }>;
}
