// The chat template's tokens for messages appended after an assistant turn, taken from the engine
// itself: render a fixed conversation ending in an assistant turn, then the same with the new messages
// (and the generation prompt); the first render must be a prefix of the second.
import type { VllmClient } from './client.js';
import type { ChatMessage, ToolSpec } from './types.js';

export class PrefixStabilityError extends Error {
  constructor(detail: string) {
    super(`chat template is not prefix-stable: ${detail}`);
    this.name = 'PrefixStabilityError';
  }
}

export interface MessageSuffix {
  /**
   * Tokens to append right after the end-of-turn token that closed the assistant turn: everything the
   * template writes after that token (e.g. "\n"), the new messages, and the generation prompt.
   */
  tokenIds: number[];
  /** The fixed conversation's render and the extended one (for audits). */
  base: number[];
  extended: number[];
}

const FIXED_PREFIX: ChatMessage[] = [
  { role: 'user', content: 'x' },
  { role: 'assistant', content: 'y' },
];

/**
 * `endOfTurnId` is the id that ends an assistant turn in the template (`<|im_end|>` for Qwen). The
 * suffix starts after the last one in the fixed render, so an episode whose turn already ends with it
 * never gets it twice.
 */
export async function messageSuffix(
  client: Pick<VllmClient, 'tokenizeChat'>,
  appended: ChatMessage[],
  opts: { endOfTurnId: number; tools?: ToolSpec[]; addGenerationPrompt?: boolean },
): Promise<MessageSuffix> {
  const tools = opts.tools;
  const [base, extended] = await Promise.all([
    client.tokenizeChat({ messages: FIXED_PREFIX, tools, addGenerationPrompt: false }),
    client.tokenizeChat({
      messages: [...FIXED_PREFIX, ...appended],
      tools,
      addGenerationPrompt: opts.addGenerationPrompt ?? true,
    }),
  ]);
  const firstDiff = base.findIndex((t, i) => extended[i] !== t);
  if (firstDiff !== -1)
    throw new PrefixStabilityError(
      `renders differ at token ${firstDiff} (${base[firstDiff]} vs ${extended[firstDiff]})`,
    );
  if (extended.length <= base.length) throw new PrefixStabilityError('appending messages added no tokens');
  const cut = base.lastIndexOf(opts.endOfTurnId);
  if (cut === -1) throw new PrefixStabilityError(`the assistant turn does not end with token ${opts.endOfTurnId}`);
  return { tokenIds: extended.slice(cut + 1), base, extended };
}

// Special-token syntax of Qwen-format templates (<|im_start|>, <|image_pad|>, <|vision_start|>, …).
const SPECIAL_TOKEN_TEXT = /<\|([A-Za-z0-9_]+)\|>/g;
/** U+2060 WORD JOINER: invisible, and splits the string so no tokenizer reads it as one special token. */
const JOINER = '\u2060';

/**
 * Text from outside the model (an environment's observation, which may echo the model's answer) with
 * every special-token string broken up, so rendering it can never create <|image_pad|>, <|im_end|>
 * or <|im_start|> tokens — no forged placeholders, no forged turn boundaries.
 */
export function neutraliseSpecialTokens(text: string): string {
  return text.replace(SPECIAL_TOKEN_TEXT, (_m, name: string) => `<${JOINER}|${name}|>`);
}
