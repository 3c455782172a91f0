// The demo's learning, measured (prints numbers; not a test): the SFT warm start of the tiny model
// (built through the durable run machinery, or found in the cache), then a multi-turn GRPO run on the
// angle-facts task with the demo's settings (configs/cpu-tiny.yaml) for --steps steps, on a fresh
// Temporal server and the engines of TEMPO_RL_TEST_ENGINE_URLS (else one started here).
//
//   node --import tsx bench/warmstart-learning.ts [--steps 16] [--json] [--variant 'grpo.lr=5e-4,rollout.temperature=1']… [--warm DIR] [--runs N]
//
// Each --variant is one GRPO run from the same warm start with those keys changed (as --set takes
// them, comma-separated); without one, a single run on the demo's settings. --runs N: each variant N
// times, as N demos would run it: the same prompt order (rollout.seed), episodes sampled afresh (each
// run's id, bench-<variant>-<k>, seeds its episodes; the same ids give the same draws).
import path from 'node:path';
import { parseArgs } from 'node:util';
import { withSets } from '../config/load.js';
import { runHandle, startOrContinueRun } from '../client/run-client.js';
import { ensureWarmStart, waitForRun } from '../client/warm-start.js';
import { readStepRecords } from '../activities/run.js';
import { startDemoRunFixture } from '../testing/run.js';
import { STEP_TIME_KEYS } from '../protocol/training-run.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '16' },
    json: { type: 'boolean', default: false },
    variant: { type: 'string', multiple: true, default: [] },
    warm: { type: 'string' },
    runs: { type: 'string', default: '1' },
  },
});
const fx = await startDemoRunFixture([`run.steps=${values.steps}`, `run.eval_interval=${values.steps}`]);
try {
  const t0 = Date.now();
  // --warm DIR: GRPO from that model directory (an earlier warm start), without building or keying one.
  const warm = values.warm
    ? { model_dir: path.resolve(values.warm), built: false }
    : await ensureWarmStart(fx.client, fx.cfg, (id) => waitForRun(fx.client, id));
  const tWarm = (Date.now() - t0) / 1000;
  const variants = values.variant.length ? values.variant : [''];
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs ${values.runs}: a positive integer`);
  for (const [v, variant] of variants.entries())
    for (let k = 0; k < runs; k++) {
      const cfg = withSets(fx.cfg, [`model.path=${warm.model_dir}`, ...variant.split(',').filter(Boolean)]);
      const runId = `bench-${v}-${k}`;
      const t1 = Date.now();
      await startOrContinueRun(fx.client, cfg, runId);
      await runHandle(fx.client, runId).result();
      const tRl = (Date.now() - t1) / 1000;
      const rows = (await readStepRecords(path.join(cfg.state_dir, 'runs', runId))).map((r) => r.metrics);
      const m = (k: string) => rows.map((r) => r[k] ?? Number.NaN);
      const curve = m('rollout/raw_reward');
      const out = {
        variant,
        run_id: runId,
        warm_start: { model_dir: warm.model_dir, built: warm.built, seconds: tWarm },
        grpo_seconds: tRl,
        reward_per_step: curve,
        first_two: (curve[0]! + curve[1]!) / 2,
        last_two: (curve[curve.length - 1]! + curve[curve.length - 2]!) / 2,
        eval_before: rows[0]!['eval_start/reward'],
        eval_after: rows[rows.length - 1]!['eval/reward'],
        first_turn_tool_call_rate_before: rows[0]!['eval_start/first_turn_tool_call_rate'],
        eval_first_answer_correct: [
          rows[0]!['eval_start/first_answer_correct'],
          rows[rows.length - 1]!['eval/first_answer_correct'],
        ],
        eval_recovery_rate: [rows[0]!['eval_start/recovery_rate'], rows[rows.length - 1]!['eval/recovery_rate']],
        first_answer_correct: m('rollout/first_answer_correct'),
        tool_call_rate: m('rollout/tool_call_rate'),
        recovery_rate: m('rollout/recovery_rate'),
        perf: Object.fromEntries(STEP_TIME_KEYS.map((k) => [k, m(k).map((v) => Math.round(v * 10) / 10)])),
      };
      if (values.json) process.stdout.write(`${JSON.stringify(out)}\n`);
      else for (const [k, v] of Object.entries(out)) process.stdout.write(`${k}: ${JSON.stringify(v)}\n`);
    }
} finally {
  await fx.close();
}
