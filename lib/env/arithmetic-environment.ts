// The arithmetic environment: a text-only, multi-step calculation. The model may evaluate
// expressions with the `calculator` tool, whose last result the episode keeps as `ans` (the state
// carried between turns), and ends with `submit` or a \boxed{} answer, graded by the default math RM.
// No image anywhere: rows refuse one, the prompt has none. The step (arithmetic.ts) and the grader
// load on first use.
import { z } from 'zod';
import type { ChatMessage } from '../data/prompt.js';
import { TextRow } from '../data/rows.js';
import type { Environment } from './types.js';

export const CALCULATOR = 'calculator';
export const SUBMIT = 'submit';

export const ARITHMETIC_SYSTEM_PROMPT = 'You are a careful assistant that solves arithmetic problems step by step.';
/** How to call the tools: every tool error repeats it, so the model learns the right calls. */
export const ARITHMETIC_TOOL_USAGE =
  `The tools are ${CALCULATOR}, called as <tool_call>{"name": "${CALCULATOR}", "arguments": {"expression": "(2 + 3) * 4"}}</tool_call> ` +
  `(+ - * / and parentheses; ans is the previous result), and ${SUBMIT}, called as <tool_call>{"name": "${SUBMIT}", "arguments": {"answer": "20"}}</tool_call>.`;
export const ARITHMETIC_INSTRUCTION = `Work step by step. ${ARITHMETIC_TOOL_USAGE} Submit your final answer, or put it in \\boxed{}.`;
export const ARITHMETIC_PLAIN_INSTRUCTION = 'Work step by step and put your final answer in \\boxed{}.';

export const CALCULATOR_TOOL = {
  type: 'function',
  function: {
    name: CALCULATOR,
    description: 'Evaluate an arithmetic expression (+ - * / and parentheses). `ans` stands for the previous result.',
    parameters: {
      type: 'object',
      properties: { expression: { type: 'string', description: 'e.g. "(14 + 9) * 3" or "ans - 25"' } },
      required: ['expression'],
    },
  },
} as const;

export const SUBMIT_TOOL = {
  type: 'function',
  function: {
    name: SUBMIT,
    description: 'Submit the final answer; this ends the episode.',
    parameters: {
      type: 'object',
      properties: { answer: { type: 'string', description: 'The final answer only, e.g. "44".' } },
      required: ['answer'],
    },
  },
} as const;

/** The calculator calls of the episode so far, and `ans`: the last successful result. */
export const ArithmeticState = z.strictObject({
  calls: z.array(
    z.strictObject({ expression: z.string(), value: z.string().nullable(), error: z.string().nullable() }),
  ),
  ans: z.number().nullable(),
});
export type ArithmeticState = z.infer<typeof ArithmeticState>;

export const arithmeticEnvironment: Environment<ArithmeticState> = {
  name: 'arithmetic',
  description: 'text-only multi-step arithmetic; a calculator tool with a running result (ans), then submit',
  rowSchema: TextRow,
  syntheticTasks: ['arithmetic'],
  stop: ['</tool_call>'],
  prompt(row, opts) {
    const system = opts.systemPrompt ?? ARITHMETIC_SYSTEM_PROMPT;
    const instruction = opts.tools ? ARITHMETIC_INSTRUCTION : ARITHMETIC_PLAIN_INSTRUCTION;
    const messages: ChatMessage[] = [
      ...(system ? [{ role: 'system' as const, content: system }] : []),
      { role: 'user', content: `${row.problem.trim()}\n\n${instruction}` },
    ];
    return { messages, tools: opts.tools ? [CALCULATOR_TOOL, SUBMIT_TOOL] : [] };
  },
  stateSchema: ArithmeticState,
  initialState: () => ({ calls: [], ans: null }),
  async step(state, text, ctx) {
    // biome-ignore lint/suspicious/noImportCycles: loaded on first use (mathjs is heavy); arithmetic.ts needs this file's tool specs
    const { arithmeticStep } = await import('./arithmetic.js');
    return arithmeticStep(state, { text, ...ctx });
  },
  async grade(answer, label, opts) {
    const { gradeAnswer } = await import('../math/reward.js');
    return gradeAnswer(answer, label, opts);
  },
};
