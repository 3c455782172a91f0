// What the episode activities need from the inference engines, as one small port. The default
// implementation adapts the vLLM client and pool (engine/); tests pass scripted doubles.
import type { TokenConventions } from '../lib/trajectory.js';
import type { ChatMessage, ToolSpec } from '../engine/types.js';
import type { SamplingSettings } from '../protocol/activities.js';

export type { SamplingSettings };

export interface RenderChatRequest {
  /** OpenAI chat messages; image parts carry data: URLs here (never blob refs). */
  messages: ChatMessage[];
  tools: ToolSpec[];
  add_generation_prompt: boolean;
}

export interface RenderedChat {
  engine: string;
  token_ids: number[];
  /** Multimodal features exactly as the engine's render route returned them (opaque; stored in the blob store). */
  features: unknown | null;
  /** Image placeholder lengths reported by the engine (tokens per image), when it reports them. */
  image_placeholder_lengths: number[] | null;
}

export interface EngineGenerateRequest {
  session_id: string;
  token_ids: number[];
  features: unknown | null;
  sampling: SamplingSettings;
  /** Engines that failed an earlier attempt of this generate; the pool must pick another when it can. */
  exclude_engines: string[];
  /** Called with the engine chosen, before the request is sent (the activity heartbeats it). */
  on_engine?: (url: string) => void;
  /** The activity's cancellation: aborts the HTTP request. */
  signal?: AbortSignal;
  /** Per-request timeout, derived from the activity's own (the engine client's timeout still bounds it). */
  timeout_ms?: number;
}

export interface EngineGenerated {
  engine: string;
  token_ids: number[];
  logprobs: number[];
  finish_reason: string;
  stop_reason: string | number | null;
  routed_experts: string | null;
  /** The weight version the engine stamped on the tokens: a number, 'unknown' (a label that is not
   *  one), or null when the engine reports none. */
  weight_version: number | 'unknown' | null;
}

export type EngineConventions = TokenConventions & {
  image_pad_id: number | null;
  /** Every single-token special the conventions know (template structure and placeholders); when
   *  absent, the EOS ids and the image placeholder. */
  special_ids?: number[];
};

export interface EpisodeEngines {
  render(req: RenderChatRequest, opts: { session_id: string }): Promise<RenderedChat>;
  generate(req: EngineGenerateRequest): Promise<EngineGenerated>;
  detokenize(ids: number[]): Promise<string>;
  /** Plain text → token ids, added tokens such as <tool_call> parsed (SFT tokenizes assistant turns). */
  tokenize?(text: string): Promise<number[]>;
  tokenConventions(): Promise<EngineConventions>;
}

/** An engine error that retrying cannot fix (a request the engine rejects as invalid). */
export class EngineRequestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EngineRequestError';
  }
}
