// Two chaos trials, the second with the async window (bench/chaos.ts runs twenty): a random component SIGKILLed at a random moment of a
// small live run and restarted; the run must still commit every step once, consume every sample once,
// run no episode twice, and end with finite weights on every engine. In the long tier (tests/long.txt):
// the fast tier kills each component on purpose (run-crash, episode-durability, server).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type Chaos, chaosTable, startChaos, type TrialResult } from '../../testing/chaos.js';

let chaos: Chaos;
const results: TrialResult[] = [];
before(async () => {
  // A new seed every run (printed): over many CI runs the trials cover every component and moment.
  const seed = Number(process.env.TEMPO_RL_CHAOS_SEED ?? Date.now() % 100_000);
  console.log(`chaos seed ${seed} (TEMPO_RL_CHAOS_SEED=${seed} repeats these trials)`);
  chaos = await startChaos(seed);
});
after(async () => {
  console.log(chaosTable(results));
  await chaos?.close();
});

for (const i of [0, 1])
  test(`chaos trial ${i}${i === 1 ? ' (async window)' : ''}: exactly once after a random SIGKILL`, {
    timeout: 900_000,
  }, async () => {
    const r = await chaos.trial(i, { async: i === 1 });
    results.push(r);
    console.log(`trial ${i}: ${r.component} at ${r.moment}; killed ${r.killed}; recovery ${r.recovery_s} s`);
    assert.deepEqual(r.violations, []);
  });
