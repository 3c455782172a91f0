// The interface every environment implements (docs/environments.md). An environment says what a
// dataset row must have, builds the prompt and tools from a row, and reads each assistant turn,
// answering with an observation (the next user message) or the end of the episode and its grade.
// Its per-episode state is JSON that the episode workflow keeps between turns (it goes into and out
// of the envStep activity), so a worker that dies mid-episode resumes with the right state. A step
// never throws on model output; input that is not model output (an empty label, a turn past
// max_turns, a state of the wrong shape) is an EnvInputError: the caller's mistake.
import { z } from 'zod';
import type { ChatMessage, ToolSpec } from '../data/prompt.js';
import type { PromptRow, RawRow, SyntheticTask } from '../data/rows.js';
import { REWARD_MATCHES, type GradeOptions, type RewardMatch } from '../math/options.js';

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

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** What a step knows besides the state and the turn's text (EnvStepInput without the text). */
export type EnvStepContext = Omit<EnvStepInput, 'text'>;

export interface EnvPromptOptions {
  /** Offer the environment's tools (multi-turn) or ask for a \boxed{} answer only. */
  tools: boolean;
  /** dataset.system_prompt; the environment's own when unset. An empty string drops the system turn. */
  systemPrompt?: string;
}

export interface EnvPrompt {
  messages: ChatMessage[];
  /** OpenAI-style tool schemas, rendered into the prompt by the chat template; [] without tools. */
  tools: ToolSpec[];
}

export interface Environment<State extends JsonValue = JsonValue> {
  readonly name: string;
  /** One line: what the task is. */
  readonly description: string;
  /** What a dataset row must have: a raw record (JSONL line, Parquet row) → the row, images not yet stored. */
  readonly rowSchema: z.ZodType<RawRow>;
  /** The dataset.synthetic_task values whose rows this environment takes; the first is its default. */
  readonly syntheticTasks: readonly SyntheticTask[];
  /** Where a multi-turn generate stops: after a tool call, so the environment answers it. */
  readonly stop: readonly string[];
  prompt(row: PromptRow, opts: EnvPromptOptions): EnvPrompt;
  /** Checks a state that comes back from the workflow (JSON from the history). */
  readonly stateSchema: z.ZodType<State>;
  initialState(row: PromptRow): State;
  step(state: State, text: string, ctx: EnvStepContext): Promise<{ result: EnvStepResult; state: State }>;
  /** The grade of a final answer: the episode's reward whenever the episode ends on one. */
  grade(answer: string, label: string, opts: GradeOptions): Promise<{ reward: 0 | 1; reason: string }>;
  /** The reward of an episode that ends without a final answer (single-turn), read off its response's
   *  whole text: a dense reward in [0, 1] (a share, a distance). Absent: the response's last \boxed{},
   *  graded by `grade`. */
  scoreResponse?(text: string, label: string): Promise<{ reward: number; reason: string }>;
}
