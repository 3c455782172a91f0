// The async window's overlap, simulated: the real trainingRun and episode
// workflows and rollout activities on a local Temporal dev server, with a scripted engine and
// stand-in trainer activities whose latencies stand for GPU times (testing/run-standins.ts).
// Prints the steady step time for rollout.max_staleness 0, 1 and 2 against the ideal
// max(rollout, train + sync), and the fraction of the ideal speed-up reached.
//
//   node --import tsx bench/overlap.ts [--rollout 60] [--train 30] [--sync 5] [--scale 0.1] [--steps 6]
//
// --scale shrinks every simulated latency (0.1: a 60 s rollout takes 6 s); step times are printed
// scaled back (so the orchestration's real seconds count 1/scale times), and projected to scale 1
// (the simulated times full size plus the orchestration as measured).
// Each episode is one generate call of the rollout's latency and concurrency is one batch, so the
// engines never run more than a step's worth of episodes at once (what real engines' capacity allows).
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startStandinRuns } from '../testing/run-standins.js';

const { values } = parseArgs({
  options: {
    rollout: { type: 'string', default: '60' },
    train: { type: 'string', default: '30' },
    sync: { type: 'string', default: '5' },
    scale: { type: 'string', default: '0.1' },
    steps: { type: 'string', default: '6' },
    json: { type: 'boolean', default: false },
  },
});
const [rollout, train, sync, scale, steps] = [
  values.rollout,
  values.train,
  values.sync,
  values.scale,
  values.steps,
].map(Number) as [number, number, number, number, number];
const BATCH = [
  'rollout.prompts_per_step=4',
  'rollout.n_samples_per_prompt=4',
  'rollout.concurrency=16',
  'rollout.max_turns=1',
];
const h = await startStandinRuns(BATCH, {
  generate_ms: rollout * 1000 * scale,
  train_ms: train * 1000 * scale,
  sync_ms: sync * 1000 * scale,
});
const rows: Array<{
  max_staleness: number;
  step_s: number;
  overhead_s: number;
  speedup: number;
  of_ideal: number;
  load: number;
}> = [];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
try {
  for (const k of [0, 1, 2]) {
    const runId = `overlap-k${k}`;
    const sets = [`run.steps=${steps}`, ...(k ? [`rollout.max_staleness=${k}`, 'grpo.tis.enabled=true'] : [])];
    await h.start(h.plan(runId, sets));
    const r = await h.result(runId);
    if (r.status !== 'completed') throw new Error(`${runId}: ${r.status} ${r.reason ?? ''}`);
    // The steady period: between consecutive train-step starts, after the first (the pipeline fills).
    const starts = h.trace.trains
      .filter((t) => t.samples.some((s) => s.includes(`/${runId}/`)))
      .map((t) => t.start)
      .sort((a, b) => a - b);
    const periodReal = median(starts.slice(1).map((t, i) => t - starts[i]!)) / 1000;
    // What is not simulated latency: orchestration (workflow tasks, activities), not scaled.
    const modelled = (k === 0 ? rollout + train + sync : Math.max(rollout, train + sync)) * scale;
    rows.push({
      max_staleness: k,
      step_s: periodReal / scale,
      overhead_s: periodReal - modelled,
      speedup: 0,
      of_ideal: 0,
      load: os.loadavg()[0]!,
    });
  }
} finally {
  await h.close();
}
const syncStep = rows[0]!.step_s;
const ideal = Math.max(rollout, train + sync);
const idealSpeedup = (rollout + train + sync) / ideal;
for (const r of rows) {
  r.speedup = syncStep / r.step_s;
  r.of_ideal = r.max_staleness === 0 ? 1 : (r.speedup - 1) / (idealSpeedup - 1);
}
if (values.json) console.log(JSON.stringify({ rollout, train, sync, scale, steps, ideal, rows }));
console.log(
  `\nsimulated GPU times: rollout ${rollout} s, train ${train} s, sync ${sync} s a step (scale ${scale}); ${steps} steps of 16 episodes; CPUs ${os.cpus().length}`,
);
console.log(
  `ideal: synchronous ${rollout + train + sync} s a step, overlapped max(rollout, train + sync) = ${ideal} s (speed-up ${idealSpeedup.toFixed(2)}×)\n`,
);
console.log(
  '| rollout.max_staleness | step time (s, scaled back) | speed-up | share of the ideal speed-up | orchestration a step (s, real) | at scale 1: step (s) / share | load avg |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- |');
// At scale 1 the simulated times are full size and the orchestration stays what it measured here.
const full = rows.map((r) => (r.max_staleness === 0 ? rollout + train + sync : ideal) + r.overhead_s);
for (const [i, r] of rows.entries()) {
  const fullShare = r.max_staleness === 0 ? '—' : ((full[0]! / full[i]! - 1) / (idealSpeedup - 1)).toFixed(2);
  console.log(
    `| ${r.max_staleness} | ${r.step_s.toFixed(1)} | ${r.speedup.toFixed(2)}× | ${r.max_staleness === 0 ? '—' : r.of_ideal.toFixed(2)} | ${r.overhead_s.toFixed(2)} | ${full[i]!.toFixed(1)} / ${fullShare} | ${r.load.toFixed(1)} |`,
  );
}
process.exit(0);
