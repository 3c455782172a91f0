// Environments for tests only: registered by the tests' rollout worker (testing/rollout-worker.ts) and
// by the test files that name them in a config, never by the product's workers or CLI.
import { geo3kEnvironment } from '../lib/env/geo3k-environment.js';
import { environmentNames, registerEnvironment } from '../lib/env/registry.js';
import type { Environment } from '../lib/env/types.js';

/** The learning test's task (tests/ts/run-learning.test.ts): geo3k's rows and prompt, and as the reward
 *  the share of the response's characters equal to the label (one character), a dense reward that GRPO
 *  sees move from the first step. On an engine that samples only among one-letter tokens
 *  (testing/only_tokens.py) it is the share of the tokens. */
export const targetLetterEnvironment: Environment = {
  ...(geo3kEnvironment as unknown as Environment),
  name: 'target-letter',
  description: 'test only: the reward is the share of the response equal to the one-character label',
  async scoreResponse(text, label) {
    if ([...label].length !== 1)
      return { reward: 0, reason: `target-letter needs a one-character label, got ${JSON.stringify(label)}` };
    const chars = [...text];
    if (!chars.length) return { reward: 0, reason: 'empty response' };
    const hits = chars.filter((c) => c === label).length;
    return { reward: hits / chars.length, reason: `${hits}/${chars.length} characters equal ${JSON.stringify(label)}` };
  },
};

const TEST_ENVIRONMENTS = [targetLetterEnvironment];

/** Registers the test environments in this process (again: nothing). */
export function registerTestEnvironments(): void {
  for (const env of TEST_ENVIRONMENTS) if (!environmentNames().includes(env.name)) registerEnvironment(env);
}
