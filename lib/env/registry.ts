// The environments an episode can run, by name (rollout.environment). Light to import: the config
// schema checks names against it; each environment loads its grader on first use.
import { arithmeticEnvironment } from './arithmetic-environment.js';
import { geo3kEnvironment } from './geo3k-environment.js';
import { openenvEnvironment } from './openenv-environment.js';
import type { Environment } from './types.js';
import { verifiersEnvironment } from './verifiers-environment.js';

const ENVIRONMENTS: Record<string, Environment> = Object.fromEntries(
  [geo3kEnvironment, arithmeticEnvironment, verifiersEnvironment, openenvEnvironment].map((env) => [
    env.name,
    env as unknown as Environment,
  ]),
);

export const DEFAULT_ENVIRONMENT = geo3kEnvironment.name;

/** The environments the Python environment worker serves (python_env in the config). */
export const PYTHON_ENVIRONMENTS: readonly string[] = [verifiersEnvironment.name, openenvEnvironment.name];

export function environmentNames(): string[] {
  return Object.keys(ENVIRONMENTS);
}

/** Adds an environment to this process's registry, beside the built-in ones: a worker process that
 *  serves more environments registers them before it reads its config (the tests' rollout worker,
 *  testing/rollout-worker.ts). A name already registered is refused. */
export function registerEnvironment(env: Environment): void {
  if (ENVIRONMENTS[env.name]) throw new Error(`environment ${JSON.stringify(env.name)} is registered already`);
  ENVIRONMENTS[env.name] = env;
}

export function getEnvironment(name: string): Environment {
  const env = ENVIRONMENTS[name];
  if (!env) throw new Error(`unknown environment ${JSON.stringify(name)} (known: ${environmentNames().join(', ')})`);
  return env;
}
