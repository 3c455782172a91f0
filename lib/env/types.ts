// The small interface every environment implements. An environment reads one assistant turn and
// answers with an observation (the next user message) or the end of the episode. Pure and
// synchronous: it runs inside an activity, but must never throw on model output.

export interface EnvStepInput {
  /** The assistant turn, decoded from the tokens the engine generated. */
  text: string;
  label: string;
  /** 1-based index of this turn. */
  turn: number;
  max_turns: number;
  tolerance?: number;
}

export interface ToolCallReport {
  name: string | null;
  answer: string | null;
  /** Why the call could not be used (bad JSON, unknown tool, missing argument); null when valid. */
  error: string | null;
}

export interface EnvStepResult {
  done: boolean;
  /** The environment's verdict on the final answer once done; null while the episode continues. */
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
