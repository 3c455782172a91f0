// Step "env": the environment reads the assistant turn and answers. Whatever the model wrote, the
// answer is a result (a reported tool error, a final answer), never an activity failure.
import { ApplicationFailure } from '@temporalio/common';
import { getEnvironment, type EnvStepInput, type EnvStepResult } from '../lib/env/index.js';

export type EnvStepActivityInput = EnvStepInput & { environment: string };

export async function envStep(input: EnvStepActivityInput): Promise<EnvStepResult> {
  let env;
  try {
    env = getEnvironment(input.environment);
  } catch (err) {
    throw ApplicationFailure.nonRetryable((err as Error).message, 'UnknownEnvironment');
  }
  try {
    return env.step(input);
  } catch (err) {
    return { done: true, score: 0, final_answer: null, observation: null, tool_call: null, reason: `environment_error: ${(err as Error).message}` };
  }
}
