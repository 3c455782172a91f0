// Step "env": the environment reads the assistant turn and answers. Whatever the model wrote, the
// answer is a result (a reported tool error, a final answer), never an activity failure. Input that
// is not the model's doing (an empty label, a turn past max_turns, an unknown environment) fails
// the activity without retries: retrying cannot fix it, and the episode must not train on it.
import { ApplicationFailure } from '@temporalio/common';
import { checkStepInput, EnvInputError, getEnvironment, type EnvStepInput, type EnvStepResult } from '../lib/env/index.js';

export type EnvStepActivityInput = EnvStepInput & { environment: string };

export async function envStep(input: EnvStepActivityInput): Promise<EnvStepResult> {
  let env;
  try {
    env = getEnvironment(input.environment);
  } catch (err) {
    throw ApplicationFailure.nonRetryable((err as Error).message, 'UnknownEnvironment');
  }
  try {
    return env.step(checkStepInput(input));
  } catch (err) {
    if (err instanceof EnvInputError) throw ApplicationFailure.nonRetryable(err.message, 'InvalidEnvStepInput');
    return { done: true, score: 0, final_answer: null, observation: null, tool_call: null, reason: `environment_error: ${(err as Error).message}` };
  }
}
