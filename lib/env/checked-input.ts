// The step input every environment checks first: the shape, the turn numbers and the label.
import { checkLabel, LabelError } from '../math/reward.js';
import { checkStepInput, EnvInputError, type EnvStepInput } from './types.js';

/** Throws EnvInputError for input that is not the model's doing (label, turn numbers). */
export function checkedInput(raw: EnvStepInput): EnvStepInput {
  const input = checkStepInput(raw);
  try {
    checkLabel(input.label);
  } catch (err) {
    if (err instanceof LabelError) throw new EnvInputError(`environment step: ${err.message}`);
    throw err;
  }
  return input;
}
