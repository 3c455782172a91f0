// A scripted engine double for episode tests: a tiny Qwen-like chat template over a character
// tokenizer, and generations scripted per call (text, EOS or not, abort, failures).
import type { EngineGenerated, EngineGenerateRequest, EpisodeEngines, RenderChatRequest, RenderedChat } from '../../../activities/episode-engines.js';

export const IM_START = 1;
export const IM_END = 2;
export const ENDOFTEXT = 3;
export const IMAGE_PAD = 4;
const SPECIAL: Record<number, string> = { [IM_START]: '<|im_start|>', [IM_END]: '<|im_end|>', [ENDOFTEXT]: '<|endoftext|>', [IMAGE_PAD]: '<|image_pad|>' };
const OFFSET = 1000;

export const encode = (text: string): number[] => [...text].map((c) => c.codePointAt(0)! + OFFSET);
export const decode = (ids: number[]): string => ids.map((id) => SPECIAL[id] ?? String.fromCodePoint(id - OFFSET)).join('');

export interface ScriptedTurn {
  text: string;
  /** End with <|im_end|> when the text has no stop string (default true). */
  eos?: boolean;
  finish?: 'abort';
  /** Override the logprobs (e.g. a wrong count). */
  logprobs?: number[];
  /** Throw this error instead of answering (the attempt fails). */
  fail?: Error & { engine?: string };
}

export class EngineDouble implements EpisodeEngines {
  readonly requests: EngineGenerateRequest[] = [];
  readonly outputs: EngineGenerated[] = [];
  renders = 0;
  constructor(
    readonly script: (req: EngineGenerateRequest, call: number) => ScriptedTurn,
    readonly imageTokensPerImage = 4,
    readonly engines = ['http://double-a', 'http://double-b'],
  ) {}

  async render(req: RenderChatRequest): Promise<RenderedChat> {
    this.renders++;
    const ids: number[] = [];
    const messages = req.messages as Array<{ role: string; content: string | Array<{ type: string; text?: string }> }>;
    if (req.tools.length > 0) ids.push(IM_START, ...encode(`system\n# Tools ${JSON.stringify(req.tools).length}`), IM_END, ...encode('\n'));
    let images = 0;
    for (const m of messages) {
      ids.push(IM_START, ...encode(`${m.role}\n`));
      if (typeof m.content === 'string') ids.push(...encode(m.content));
      else
        for (const part of m.content) {
          if (part.type === 'image_url') {
            images++;
            ids.push(...Array(this.imageTokensPerImage).fill(IMAGE_PAD));
          } else ids.push(...encode(part.text ?? ''));
        }
      ids.push(IM_END, ...encode('\n'));
    }
    if (req.add_generation_prompt) ids.push(IM_START, ...encode('assistant\n'));
    return { engine: this.engines[0]!, token_ids: ids, features: images ? { fake_features: images } : null, image_placeholder_lengths: images ? Array(images).fill(this.imageTokensPerImage) : null };
  }

  async generate(req: EngineGenerateRequest): Promise<EngineGenerated> {
    const call = this.requests.length;
    this.requests.push(structuredClone(req));
    const turn = this.script(req, call);
    const engine = this.engines.find((e) => !req.exclude_engines.includes(e)) ?? this.engines[0]!;
    if (turn.fail) throw Object.assign(turn.fail, { engine: turn.fail.engine ?? engine });
    let text = turn.text;
    let eos = turn.eos ?? true;
    for (const s of req.sampling.stop) {
      const at = text.indexOf(s);
      if (at >= 0) {
        text = text.slice(0, at + s.length);
        eos = false;
      }
    }
    let ids = [...encode(text), ...(eos ? [IM_END] : [])];
    let finish = turn.finish ?? 'stop';
    if (ids.length > req.sampling.max_tokens) {
      ids = ids.slice(0, req.sampling.max_tokens);
      finish = 'length';
    }
    const out: EngineGenerated = {
      engine,
      token_ids: ids,
      logprobs: turn.logprobs ?? ids.map((_, i) => -0.01 * ((i % 7) + 1)),
      finish_reason: finish,
      stop_reason: null,
      routed_experts: null,
      weight_version: null,
    };
    this.outputs.push(out);
    return out;
  }

  async detokenize(ids: number[]): Promise<string> {
    return decode(ids);
  }

  async tokenConventions() {
    return { eos_ids: [IM_END, ENDOFTEXT], end_of_turn_id: IM_END, image_pad_id: IMAGE_PAD };
  }
}
