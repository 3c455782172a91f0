// The environments an episode can run, by name.
import { geo3kEnvironment } from './geo3k.js';
import type { Environment } from './types.js';

export type { Environment, EnvStepInput, EnvStepResult, ToolCallReport } from './types.js';
export { checkStepInput, EnvInputError, EnvStepInputSchema } from './types.js';
export { CALC_SCORE, geo3kStep } from './geo3k.js';

const ENVIRONMENTS: Record<string, Environment> = { [geo3kEnvironment.name]: geo3kEnvironment };

export function environmentNames(): string[] {
  return Object.keys(ENVIRONMENTS);
}

export function getEnvironment(name: string): Environment {
  const env = ENVIRONMENTS[name];
  if (!env) throw new Error(`unknown environment ${JSON.stringify(name)} (known: ${environmentNames().join(', ')})`);
  return env;
}
