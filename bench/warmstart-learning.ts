// The demo's learning, measured (prints numbers; not a test): the SFT warm start of the tiny model
// (built through the durable run machinery, or found in the cache), then a multi-turn GRPO run on the
// angle-facts task with the demo's settings (configs/cpu-tiny.yaml) for --steps steps, on a fresh
// Temporal server and the engines of TEMPO_RL_TEST_ENGINE_URLS (else one started here).
//
//   node --import tsx bench/warmstart-learning.ts [--steps 8] [--json]
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import YAML from 'yaml';
import { REPO_ROOT } from '../lib/paths.js';
import { runHandle, startOrContinueRun } from '../lib/run-client.js';
import { ensureWarmStart, waitForRun } from '../lib/warm-start.js';
import { readStepRecords } from '../activities/run.js';
import { startRunFixture } from '../tests/ts/support/run.js';

const { values } = parseArgs({ options: { steps: { type: 'string', default: '8' }, json: { type: 'boolean', default: false } } });
const demo = YAML.parse(readFileSync(path.join(REPO_ROOT, 'configs', 'cpu-tiny.yaml'), 'utf8')) as Record<string, Record<string, unknown>>;
const sections = ['dataset', 'rollout', 'grpo', 'run'].map((k) => `${k}=${JSON.stringify(demo[k])}`);
const fx = await startRunFixture([...sections, `engines.max_model_len=${demo.engines!.max_model_len}`, `run.steps=${values.steps}`, `run.eval_interval=${values.steps}`]);
try {
  const t0 = Date.now();
  const warm = await ensureWarmStart(fx.client, fx.cfg, (id) => waitForRun(fx.client, id));
  const tWarm = (Date.now() - t0) / 1000;
  const cfg = { ...fx.cfg, model: { ...fx.cfg.model, path: warm.model_dir } };
  const runId = `bench-${Date.now()}`;
  const t1 = Date.now();
  await startOrContinueRun(fx.client, cfg, runId);
  await runHandle(fx.client, runId).result();
  const tRl = (Date.now() - t1) / 1000;
  const rows = (await readStepRecords(path.join(cfg.state_dir, 'runs', runId))).map((r) => r.metrics);
  const m = (k: string) => rows.map((r) => r[k] ?? Number.NaN);
  const curve = m('rollout/raw_reward');
  const out = {
    warm_start: { model_dir: warm.model_dir, built: warm.built, seconds: tWarm },
    grpo_seconds: tRl,
    reward_per_step: curve,
    first_two: (curve[0]! + curve[1]!) / 2,
    last_two: (curve[curve.length - 1]! + curve[curve.length - 2]!) / 2,
    eval_before: rows[0]!['eval_start/reward'], eval_after: rows[rows.length - 1]!['eval/reward'],
    first_turn_tool_call_rate_before: rows[0]!['eval_start/first_turn_tool_call_rate'],
    first_answer_correct: m('rollout/first_answer_correct'),
    tool_call_rate: m('rollout/tool_call_rate'),
    recovery_rate: m('rollout/recovery_rate'),
  };
  if (values.json) process.stdout.write(`${JSON.stringify(out)}\n`);
  else for (const [k, v] of Object.entries(out)) process.stdout.write(`${k}: ${JSON.stringify(v)}\n`);
} finally {
  await fx.close();
}
