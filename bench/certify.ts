// The certification matrix (docs/certification.md): for the synchronous run and the async window, an
// uninterrupted reference and runs killed at every durable step and phase; prints the table (kill point
// → recovered in s, identical yes/no) and writes it to bench/results/certify-<date>.json.
//   node --import tsx bench/certify.ts [sync|async|both] [--references] [--warm DIR] [--plans a,b|ci] [--set k=v]…
// --warm DIR|cached: the runs start from a warm-started model (cached: the newest in the cache, the
// demo's): two-turn episodes,
// so the environment step and the observation render are killed too. --plans: only these of the matrix
// (ci: CI's subset, tests/ts/certify.test.ts). --set: config keys for the engine and every run (a GPU:
// --set model.num_gpus=1 --set model.dtype=bfloat16 --set engines.gpu_memory_utilization=0.3). --engine-set: keys
// for the engine alone (one GPU: --engine-set engines.colocate=true; the runs reach it by URL).
// --references: the reference runs only (with TEMPO_RL_RECORD_HISTORIES=1 they record the replay
// fixtures training-run-certified-* and episode-certified-*).
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../base/paths.js';
import { parseArgs } from 'node:util';
import { cachedWarmStart } from '../client/warm-start.js';
import {
  certify,
  certifySets,
  certTable,
  ciSubset,
  fullMatrix,
  type CertRow,
  type Mode,
} from '../testing/certify-matrix.js';
import { engineLogprobsOnly } from '../testing/certify.js';
import { testEngines } from '../testing/engines.js';

const { values: flags, positionals } = parseArgs({
  options: {
    references: { type: 'boolean', default: false },
    warm: { type: 'string' },
    plans: { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
    'engine-set': { type: 'string', multiple: true, default: [] },
  },
  allowPositionals: true,
});
const referencesOnly = flags.references;
const arg = positionals[0] ?? 'both';
const only = flags.plans?.split(',');
const warm = flags.warm === 'cached' ? (cachedWarmStart() ?? undefined) : flags.warm && path.resolve(flags.warm);
if (flags.warm && !warm) throw new Error('--warm cached: no warm start in the cache (run `tempo-rl demo` once)');
const plans = () =>
  referencesOnly ? [] : only?.[0] === 'ci' ? ciSubset() : fullMatrix().filter((p) => !only || only.includes(p.name));
const modes: Mode[] = arg === 'both' ? ['sync', 'async'] : [arg as Mode];
if (!modes.every((m) => m === 'sync' || m === 'async')) throw new Error(`mode must be sync, async or both: ${arg}`);
const engines = await testEngines(1, { sets: ['run.deterministic=true', ...flags.set, ...flags['engine-set']] });
// Under a time limit (scripts/gpu-check.sh runs this under timeout): the engine started here is stopped
// before this process ends, or it would hold its share of the GPU after it.
for (const signal of ['SIGTERM', 'SIGINT'] as const)
  process.once(signal, () => void engines.stop().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143)));
const rows: CertRow[] = [];
const diffs: Record<string, Record<string, string[]>> = {};
const t0 = Date.now();
try {
  for (const mode of modes) {
    const sets = [...certifySets(mode, 3, warm), ...flags.set];
    const out = await certify(engines, mode, plans(), { record: !flags.warm, sets });
    rows.push(...out.rows);
    diffs[mode] = out.diffs;
    console.log(certTable(out.rows));
  }
} finally {
  await engines.stop();
}
console.log(certTable(rows));
for (const [mode, d] of Object.entries(diffs))
  for (const [plan, lines] of Object.entries(d))
    if (lines.length)
      console.log(
        `${mode} ${plan} differs${engineLogprobsOnly(lines) ? " in the engine's logprobs of the same tokens only: tokens, rewards, every other metric and the final weights are the reference's" : ''}:\n  ${lines.join('\n  ')}`,
      );
const out = path.join(
  REPO_ROOT,
  'bench',
  'results',
  `certify-${new Date().toISOString().slice(0, 10)}${flags.warm ? '-warm' : ''}${only ? `-${only.join('-')}` : ''}.json`,
);
mkdirSync(path.dirname(out), { recursive: true });
writeFileSync(out, `${JSON.stringify({ seconds: (Date.now() - t0) / 1000, rows, diffs }, null, 1)}\n`);
console.log(`wrote ${out}`);
