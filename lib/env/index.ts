// Environments: the interface (types.ts), the registry (registry.ts) and the steps of each.
export type {
  Environment,
  EnvPrompt,
  EnvPromptOptions,
  EnvStepContext,
  EnvStepInput,
  EnvStepResult,
  JsonValue,
  ToolCallReport,
} from './types.js';
export { checkStepInput, EnvInputError, EnvStepInputSchema } from './types.js';
export { DEFAULT_ENVIRONMENT, environmentNames, getEnvironment } from './registry.js';
export { CALC_SCORE, geo3kStep } from './geo3k.js';
export { arithmeticStep } from './arithmetic.js';
export { CALCULATOR, SUBMIT } from './arithmetic-environment.js';
