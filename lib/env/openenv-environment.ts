// openenv: an OpenEnv environment server (python_env.openenv in the config: a URL, or an ASGI app the
// environment worker starts), reached through the environment worker (workers/environments). The
// episode workflow owns the turn loop (workflows/openenv-episode.ts): the server's reset gives the
// first user message, each model turn becomes an action of the server's step, and the steps' rewards
// are the reward; so the workflow never calls step or grade here. A dataset row names a reset seed
// by its index (dataset.synthetic_task taskset).
import { z } from 'zod';
import { TextRow } from '../data/rows.js';
import { EnvInputError, type Environment } from './types.js';

type NoState = Record<string, never>;

const inServer = (what: string) =>
  new EnvInputError(`the openenv environment ${what} in its OpenEnv server (python_env.openenv), not here`);

export const openenvEnvironment: Environment<NoState> = {
  name: 'openenv',
  description: 'an OpenEnv environment server (python_env.openenv): reset, then a step per model turn',
  rowSchema: TextRow,
  syntheticTasks: ['taskset'],
  // Tool mode's stop string (after a call of the step tool); config/run-plan.ts stops nowhere in text mode.
  stop: ['</tool_call>'],
  prompt: (_row, { systemPrompt }) => ({
    messages: systemPrompt ? [{ role: 'system', content: systemPrompt }] : [],
    tools: [],
  }),
  stateSchema: z.strictObject({}) as z.ZodType<NoState>,
  initialState: () => ({}),
  async step() {
    throw inServer('steps');
  },
  async grade() {
    throw inServer('grades');
  },
};
