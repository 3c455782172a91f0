// verifiers: an environment written in Python with verifiers' v1 API (python_env in the config), run
// by the environment worker (workers/environments). Its taskset holds the problems, so a dataset row
// only names a task by index (dataset.synthetic_task taskset); its harness owns the turn loop and
// its rubric gives the reward, so the episode workflow never calls step or grade here: its model
// calls come back to the workflow (workflows/python-episode.ts).
import { z } from 'zod';
import { TextRow } from '../data/rows.js';
import { EnvInputError, type Environment } from './types.js';

type NoState = Record<string, never>;

const inPython = (what: string) =>
  new EnvInputError(`the verifiers environment ${what} in the environment worker (python_env), not here`);

export const verifiersEnvironment: Environment<NoState> = {
  name: 'verifiers',
  description: 'a verifiers (v1) environment in Python, named by python_env: its taskset, harness and rubric',
  rowSchema: TextRow,
  syntheticTasks: ['taskset'],
  stop: [],
  prompt: () => ({ messages: [], tools: [] }),
  stateSchema: z.strictObject({}) as z.ZodType<NoState>,
  initialState: () => ({}),
  async step() {
    throw inPython('steps');
  },
  async grade() {
    throw inPython('grades');
  },
};
