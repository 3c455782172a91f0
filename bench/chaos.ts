// The chaos suite, measured: N trials (default 20) of a small run on the CPU config with
// two engines, each SIGKILLing a random component at a random moment and restarting it; prints each
// trial, then kills and recovery p50/p95 per component and every violation (testing/chaos.ts).
//
//   node --import tsx bench/chaos.ts [--trials 20] [--seed 1] [--components trainer,rollout_worker] [--async] [--json]
// --async: every trial trains with the async window (rollout.max_staleness 1).
import { parseArgs } from 'node:util';
import { chaosTable, COMPONENTS, type Component, startChaos, type TrialResult } from '../testing/chaos.js';

const { values } = parseArgs({
  options: {
    trials: { type: 'string', default: '20' },
    seed: { type: 'string', default: '1' },
    components: { type: 'string', default: COMPONENTS.join(',') },
    json: { type: 'boolean', default: false },
    async: { type: 'boolean', default: false },
  },
});
const components = values.components.split(',') as Component[];
const unknown = components.filter((c) => !COMPONENTS.includes(c));
if (unknown.length) {
  console.error(`--components: unknown ${unknown.join(', ')} (known: ${COMPONENTS.join(', ')})`);
  process.exit(2);
}
const chaos = await startChaos(Number(values.seed), components);
const results: TrialResult[] = [];
try {
  for (let i = 0; i < Number(values.trials); i++) {
    const r = await chaos.trial(i, { async: values.async });
    results.push(r);
    console.log(
      `trial ${i}: ${r.component} at ${r.moment}: ${r.killed ? `recovered in ${r.recovery_s?.toFixed(1)} s` : 'not killed (the run ended first)'}; ${r.violations.length} violations; ${r.seconds.toFixed(0)} s`,
    );
  }
} finally {
  await chaos.close();
}
console.log(values.json ? JSON.stringify(results) : chaosTable(results));
process.exit(results.some((r) => r.violations.length) ? 1 : 0);
