// Test state on disk: temp state dirs hold checkpoints that run to gigabytes over a suite.
import { rmSync } from 'node:fs';

/** Removes a test's temp state dir, unless TEMPO_RL_KEEP_TEST_STATE=1 keeps it for a look after the run. */
export function removeTestState(dir: string): void {
  if (process.env.TEMPO_RL_KEEP_TEST_STATE !== '1') rmSync(dir, { recursive: true, force: true });
}
