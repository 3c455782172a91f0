// Step "env": the environment reads the assistant turn and answers. Whatever the model wrote, the
// answer is a result (a reported tool error, a final answer), never an activity failure. Input that
// is not the model's doing (an empty label, a turn past max_turns, an unknown environment, a state
// of the wrong shape) fails the activity without retries: retrying cannot fix it, and the episode
// must not train on it. The episode's state comes in and goes out with each step: the workflow
// keeps it in its history, so a step retried on another worker starts from the same state.
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { checkStepInput, EnvInputError, getEnvironment, type Environment, type JsonValue } from '../lib/env/index.js';
import type { EnvStepActivityInput, EnvStepActivityResult } from '../protocol/activities.js';

function stateOf(env: Environment, input: EnvStepActivityInput): JsonValue {
  if (input.state === undefined) return env.initialState({ id: '', problem: '', answer: input.label, images: [] });
  const parsed = env.stateSchema.safeParse(input.state);
  if (!parsed.success)
    throw new EnvInputError(
      `environment step: not a state of environment ${env.name}: ${z.prettifyError(parsed.error)}`,
    );
  return parsed.data;
}

export async function envStep(input: EnvStepActivityInput): Promise<EnvStepActivityResult> {
  let env: Environment;
  try {
    env = getEnvironment(input.environment);
  } catch (err) {
    throw ApplicationFailure.nonRetryable((err as Error).message, 'UnknownEnvironment');
  }
  try {
    const { text, ...ctx } = checkStepInput(input);
    const { result, state } = await env.step(stateOf(env, input), text, ctx);
    return { ...result, state };
  } catch (err) {
    if (err instanceof EnvInputError) throw ApplicationFailure.nonRetryable(err.message, 'InvalidEnvStepInput');
    return {
      done: true,
      score: 0,
      final_answer: null,
      observation: null,
      tool_call: null,
      reason: `environment_error: ${(err as Error).message}`,
    };
  }
}
