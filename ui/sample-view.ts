// What the pages show of a sample beyond its rows: where each turn's tokens sit in its response (the
// generated tokens, the synthetic end-of-turn token the trajectory adds after a stop string, the
// observation), each turn's text, and its prompt as the model saw it (the chat template's messages,
// an image's placeholder tokens as one part).
import type { Sample } from '../lib/contract.js';
import type { TokenDecoder } from './tokens.js';

export interface TurnSpan {
  /** Response-relative offsets, as lib/trajectory.ts TurnSpan. */
  gen_start: number;
  gen_len: number;
  /** The synthetic end-of-turn token (loss mask 0), or null when the engine ended the turn itself. */
  synthetic_eos_at: number | null;
  obs_start: number;
  obs_len: number;
}

/**
 * Each turn's place in the response. A sample counts each turn's generated and observation tokens,
 * not the synthetic end-of-turn token between them (lib/trajectory.ts appendGenerated): it is the
 * loss-mask-0 token that the mask shows after a turn's generated tokens, beyond its observation's.
 */
export function turnSpans(sample: Pick<Sample, 'turns' | 'loss_mask'>): TurnSpan[] {
  const mask = sample.loss_mask;
  let at = 0;
  return sample.turns.map((t) => {
    const gen_start = at;
    at += t.generated_tokens;
    let masked = 0;
    while (at + masked < mask.length && mask[at + masked] === 0) masked++;
    const synthetic = masked > t.observation_tokens;
    const span = {
      gen_start,
      gen_len: t.generated_tokens,
      synthetic_eos_at: synthetic ? at : null,
      obs_start: at + (synthetic ? 1 : 0),
      obs_len: t.observation_tokens,
    };
    at = span.obs_start + t.observation_tokens;
    return span;
  });
}

/** A turn's tokens without the end-of-turn token the engine ended it with: the turn's text as the
 *  history has it (activities/generate.ts decodes the tokens less the EOS ids). */
function withoutEndToken(ids: number[], decoder: TokenDecoder): number[] {
  const last = ids.at(-1);
  return last !== undefined && END_TOKENS.has(decoder.piece(last)) ? ids.slice(0, -1) : ids;
}

const END_TOKENS = new Set(['<|im_end|>', '<|endoftext|>']);

/** Each turn's generated text and the observation after it (null: none), decoded. */
export function turnTexts(
  sample: Pick<Sample, 'turns' | 'loss_mask' | 'response_ids'>,
  decoder: TokenDecoder,
): Array<{ text: string; observation: string | null }> {
  const ids = sample.response_ids;
  return turnSpans(sample).map((s) => ({
    text: decoder.text(withoutEndToken(ids.slice(s.gen_start, s.gen_start + s.gen_len), decoder)),
    observation: s.obs_len ? decoder.text(ids.slice(s.obs_start, s.obs_start + s.obs_len)) : null,
  }));
}

export type PromptPart = { text: string } | { image: number; tokens: number };

export interface PromptMessage {
  /** system, user, assistant… (null: text outside the chat template's messages). */
  role: string | null;
  parts: PromptPart[];
}

const SPECIAL = /^<\|[^|]+\|>$/;
const IMAGE_MARKS = new Set(['<|vision_start|>', '<|vision_end|>']);

/** The prompt as the model saw it: the chat template's messages (<|im_start|>role … <|im_end|>), their
 *  text decoded, each run of an image's placeholder tokens as the sample's next image. */
export function promptMessages(promptIds: number[], decoder: TokenDecoder): PromptMessage[] {
  const messages: PromptMessage[] = [];
  let current: PromptMessage | null = null;
  let text: number[] = [];
  let images = 0;
  const flush = () => {
    if (!text.length) return;
    const decoded = decoder.text(text);
    text = [];
    if (!current) messages.push((current = { role: null, parts: [] }));
    if (current.role === '' && current.parts.length === 0) {
      // the role is the first line of the message
      const nl = decoded.indexOf('\n');
      current.role = nl < 0 ? decoded : decoded.slice(0, nl);
      if (nl >= 0 && nl + 1 < decoded.length) current.parts.push({ text: decoded.slice(nl + 1) });
    } else current.parts.push({ text: decoded });
  };
  for (let i = 0; i < promptIds.length; i++) {
    const id = promptIds[i]!;
    const piece = decoder.piece(id);
    if (!SPECIAL.test(piece)) {
      text.push(id);
      continue;
    }
    flush();
    let run = 1;
    while (promptIds[i + run] === id) run++;
    if (piece === '<|im_start|>') messages.push((current = { role: '', parts: [] }));
    else if (piece === '<|im_end|>') current = null;
    else if (run > 1 || /pad/.test(piece)) {
      if (!current) messages.push((current = { role: null, parts: [] }));
      current.parts.push({ image: images++, tokens: run });
    } else if (!IMAGE_MARKS.has(piece)) {
      if (!current) messages.push((current = { role: null, parts: [] }));
      current.parts.push({ text: piece });
    }
    i += run - 1;
  }
  flush();
  // the line breaks between the template's messages are not a message
  return messages
    .filter((m) => m.role !== null || m.parts.some((p) => !('text' in p) || p.text.trim() !== ''))
    .map((m) => ({ ...m, role: m.role === '' ? null : m.role }));
}
