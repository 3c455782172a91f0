// The whole certification matrix (testing/certify-matrix.ts; CI runs tests/ts/certify.test.ts's subset):
// every durable step killed before it starts, half-way and after its work but before its result is
// recorded, and the Temporal server in three phases; synchronous and with the async window. Every kill
// point reached must leave a run equal to the reference bit for bit.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { cachedWarmStart } from '../../../client/warm-start.js';
import { certify, certifySets, certTable, fullMatrix, type Mode } from '../../../testing/certify-matrix.js';
import { type TestEngines, testEngines } from '../../../testing/engines.js';

let engines: TestEngines;
before(async () => {
  engines = await testEngines(1, { sets: ['run.deterministic=true'] });
});
after(async () => {
  await engines?.stop();
});

for (const mode of ['sync', 'async'] as Mode[])
  test(`${mode}: every kill point of the matrix leaves the run equal to the reference`, {
    timeout: 3_600_000,
  }, async () => {
    // The demo's warm start when cached: two-turn episodes, so the environment step is killed too.
    const warm = cachedWarmStart() ?? undefined;
    if (!warm) console.log('no warm start in the cache: one-turn episodes, the environment-step kills are not reached');
    const { rows, diffs } = await certify(engines, mode, fullMatrix(), { sets: certifySets(mode, 3, warm) });
    console.log(certTable(rows));
    for (const [plan, lines] of Object.entries(diffs))
      assert.deepEqual(lines, [], `${mode} ${plan} equals the reference`);
    assert.ok(rows.filter((r) => r.fired).length >= rows.length * 0.8, 'most kill points were reached');
  });
