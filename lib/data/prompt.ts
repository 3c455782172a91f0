// Prompt construction for Geo3K-style problems: system prompt, the user turn (image parts, then the
// question and the instruction) and the calc_score tool schema, in the OpenAI chat format.
// Image parts stay blob refs here; prompt-images.ts turns them into data: URLs for an engine.
import type { PromptRow } from './rows.js';

export const DEFAULT_SYSTEM_PROMPT = 'You are a helpful assistant that solves geometry problems step by step.';

export const CALC_SCORE_TOOL = {
  type: 'function',
  function: {
    name: 'calc_score',
    description: 'Check a candidate final answer to the problem. Returns whether it is correct.',
    parameters: {
      type: 'object',
      properties: {
        answer: { type: 'string', description: 'The final answer only, e.g. "5\\sqrt{3}" or "13\\pi/9".' },
      },
      required: ['answer'],
    },
  },
} as const;

export const TOOL_INSTRUCTION =
  'Reason step by step. You may check an answer with the calc_score tool, called as ' +
  '<tool_call>{"name": "calc_score", "arguments": {"answer": "..."}}</tool_call>. ' +
  'Put your final answer in \\boxed{}.';
export const PLAIN_INSTRUCTION = 'Reason step by step and put your final answer in \\boxed{}.';

// One message type from the dataset row to the engine request (engine/types.ts).
export type { ChatMessage, ContentPart, ToolSpec } from '../../engine/types.js';
import type { ChatMessage, ContentPart } from '../../engine/types.js';
export interface BuildMessagesOptions {
  /** dataset.system_prompt; the default above when unset. An empty string drops the system turn. */
  systemPrompt?: string;
  /** Offer the calc_score tool (multi-turn) or ask for \boxed{} only. Default true. */
  tools?: boolean;
  /** Overrides the instruction appended to the question. */
  instruction?: string;
}
export interface BuiltPrompt {
  messages: ChatMessage[];
  tools: Array<typeof CALC_SCORE_TOOL>;
  instruction: string;
}

/** Image placeholders written into some datasets' problem text (HF geo3k has "<image>"). */
const IMAGE_PLACEHOLDER = /<image>\s*/g;

export function buildMessages(row: PromptRow, opts: BuildMessagesOptions = {}): BuiltPrompt {
  const withTools = opts.tools ?? true;
  const instruction = opts.instruction ?? (withTools ? TOOL_INSTRUCTION : PLAIN_INSTRUCTION);
  const system = opts.systemPrompt ?? DEFAULT_SYSTEM_PROMPT;
  const question = row.problem.replace(IMAGE_PLACEHOLDER, '').trim();
  const content: ContentPart[] = [
    ...row.images.map((ref): ContentPart => ({ type: 'image_url', image_url: { url: ref } })),
    { type: 'text', text: `${question}\n\n${instruction}` },
  ];
  const messages: ChatMessage[] = [
    ...(system ? [{ role: 'system' as const, content: system }] : []),
    { role: 'user', content },
  ];
  return { messages, tools: withTools ? [CALC_SCORE_TOOL] : [], instruction };
}
