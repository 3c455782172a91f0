// The small interface every environment implements. An environment reads one assistant turn and
// answers with an observation (the next user message) or the end of the episode. Pure and
// synchronous: it runs inside an activity, and never throws on model output. Input that is not
// model output (an empty label, a turn past max_turns) is an EnvInputError: the caller's mistake.
import { z } from 'zod';
import { REWARD_MATCHES, type RewardMatch } from '../math/options.js';

export const EnvStepInputSchema = z
  .object({
    /** The assistant turn, decoded from the tokens the engine generated. */
    text: z.string(),
    label: z.string(),
    /** 1-based index of this turn. */
    turn: z.number().int().positive(),
    max_turns: z.number().int().positive(),
    tolerance: z.number().nonnegative().optional(),
    match: z.enum(REWARD_MATCHES).optional(),
  })
  .refine((i) => i.turn <= i.max_turns, { message: 'is greater than max_turns', path: ['turn'] });

export interface EnvStepInput {
  text: string;
  label: string;
  turn: number;
  max_turns: number;
  /** Absolute tolerance of the grader (docs/reward.md); 0 or absent: off. */
  tolerance?: number;
  /** exact (default) or rounded. */
  match?: RewardMatch;
}

export class EnvInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EnvInputError';
  }
}

/** The input, checked; throws EnvInputError naming the field and the value it got. */
export function checkStepInput(input: unknown): EnvStepInput {
  const r = EnvStepInputSchema.safeParse(input);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const field = issue.path.join('.') || 'input';
  const got = (input as Record<string, unknown> | null)?.[String(issue.path[0])];
  throw new EnvInputError(`environment step: ${field} ${issue.message} (got ${JSON.stringify(got) ?? String(got)})`);
}

export interface ToolCallReport {
  name: string | null;
  answer: string | null;
  /** Why the call could not be used (bad JSON, unknown tool, missing argument); null when valid. */
  error: string | null;
}

export interface EnvStepResult {
  done: boolean;
  /**
   * The grade of the answer this turn was judged on: the calc_score answer (1 correct, 0 wrong,
   * also while the episode continues) or, once done without one, the final answer. null only when
   * nothing was graded (a tool error with turns left).
   */
  score: 0 | 1 | null;
  /** The answer the episode ends with (tool-call answer, else \boxed{}, else last line); null while running. */
  final_answer: string | null;
  /** The next user message; null when done. */
  observation: string | null;
  tool_call: ToolCallReport | null;
  /** A short machine-readable word for what happened (correct, wrong, last_chance, out_of_turns, …). */
  reason: string;
}

export interface Environment {
  readonly name: string;
  step(input: EnvStepInput): EnvStepResult;
}
