// Geo3K as a registered environment: image rows, the calc_score prompt of lib/data/prompt.ts, a stop
// after each tool call, and no state between turns (every turn is judged on its own text). The
// grader (mathjs) is loaded on the first step, not when the registry is read (config, CLI).
import { z } from 'zod';
import { buildMessages } from '../data/prompt.js';
import { RawRow } from '../data/rows.js';
import type { Environment } from './types.js';

type Geo3kState = Record<string, never>;

export const geo3kEnvironment: Environment<Geo3kState> = {
  name: 'geo3k',
  description: 'geometry problems with a figure; the calc_score tool checks a candidate answer',
  rowSchema: RawRow,
  syntheticTasks: ['measure', 'angle_facts'],
  stop: ['</tool_call>'],
  prompt(row, opts) {
    const built = buildMessages(row, { tools: opts.tools, systemPrompt: opts.systemPrompt });
    return { messages: built.messages, tools: [...built.tools] };
  },
  stateSchema: z.strictObject({}) as z.ZodType<Geo3kState>,
  initialState: () => ({}),
  async step(state, text, ctx) {
    const { geo3kStep } = await import('./geo3k.js');
    return { result: geo3kStep({ text, ...ctx }), state };
  },
  async grade(answer, label, opts) {
    const { gradeAnswer } = await import('../math/reward.js');
    return gradeAnswer(answer, label, opts);
  },
};
