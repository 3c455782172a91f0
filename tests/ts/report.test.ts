// `tempo-rl report`: the HTML page has a plot per metric; headless Chromium renders it to a PNG.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { headlineLines, learningSummary, smoothed } from '../../lib/learning-summary.js';
import { REPORT_PLOTS, writeReport } from '../../lib/report.js';
import { CHROMIUM_ARGS } from '../../testing/chromium.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) =>
  existsSync(p),
);

async function fakeRun(): Promise<{ file: string; dir: string }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-report-'));
  const cfg = loadConfig({ env: {}, sets: [`state_dir=${dir}`] });
  mkdirSync(path.join(dir, 'runs', 'r1'), { recursive: true });
  const rows = [0, 1, 2, 3].map((step) => ({
    step,
    'rollout/raw_reward': 0.1 + 0.2 * step,
    'rollout/response_len': 40 - step,
    'rollout/truncated_ratio': 0.5,
    'train/train_rollout_logprob_abs_diff': 1e-7,
    'perf/step_time': 30 + step,
    'perf/rollout_tokens_per_second': 12,
  }));
  writeFileSync(path.join(dir, 'runs', 'r1', 'metrics.jsonl'), rows.map((r) => JSON.stringify(r)).join('\n'));
  return { file: await writeReport(cfg, 'r1'), dir };
}

test('the report has one figure per metric, the data points and no external resources', async () => {
  const { file } = await fakeRun();
  const html = readFileSync(file, 'utf8');
  assert.equal((html.match(/<figure>/g) ?? []).length, REPORT_PLOTS.length);
  assert.match(html, /step 3: 0\.700/);
  assert.doesNotMatch(html, /<script|https?:\/\//);
});

// A demo-like run: the step curve is noisy (a dip at step 3), the held-out eval clearly up.
const DEMO_ROWS = [0.12, 0.41, 0.34, 0.72, 0.62, 0.81, 0.66, 0.69, 0.69, 0.69].map((reward, step) => ({
  step,
  'rollout/raw_reward': reward,
  'rollout/n_episodes': 32,
  'rollout/failed': 0,
  'rollout/turns': 1.5,
  // 32 first turns all parseable, 16 second turns of which 12 parseable: 44 of 48 turns
  'rollout/tool_call_rate': 44 / 48,
  'rollout/first_turn_tool_call_rate': 1,
  'rollout/truncated_ratio': step === 6 ? 0.0625 : 0,
  ...(step === 0
    ? {
        'eval_start/reward': 0.156,
        'eval_start/first_answer_correct': 0.094,
        'eval_start/n': 32,
        'rollout/first_answer_correct': 0.0625,
        'rollout/n_groups': 8,
      }
    : {}),
  ...(step === 9 ? { 'eval/reward': 0.594, 'eval/first_answer_correct': 0.531, 'eval/n': 32 } : {}),
}));

test('the summary leads with the held-out eval, and reads the noisy reward by halves with their spread', () => {
  const s = learningSummary(DEMO_ROWS);
  assert.equal(s.eval_before, 0.156);
  assert.equal(s.eval_after, 0.594);
  assert.ok(
    Math.abs(s.reward_halves!.first.mean - 0.442) < 1e-9 && Math.abs(s.reward_halves!.second.mean - 0.708) < 1e-9,
  );
  assert.equal(s.reward_halves!.first.steps, 5);
  assert.ok(s.reward_halves!.first.sd > 0.2, "the first half's spread shows");
  assert.ok(
    Math.abs(s.tool_calls!.later_turns! - 0.75) < 1e-9,
    `second turns: 12 of 16 parseable, ${s.tool_calls!.later_turns}`,
  );
  const lines = headlineLines(s);
  assert.match(
    lines[0]!,
    /^held-out eval reward: 0\.16 before → 0\.59 after training \(first answer right 9% → 53%; 32 prompts/,
  );
  assert.match(lines[1]!, /0\.44 ± 0\.2\d → 0\.71 ± 0\.0\d .*noisy: each step is 32 sampled episodes/);
  assert.match(lines[2]!, /first turns 100%, turns after a wrong answer 75%/);
  assert.match(
    lines[3]!,
    /^step 0, before any update: training reward 0\.12 on 8 train prompts × 4, first answer right 6%; the held-out eval before: 0\.16 on 32 prompts × 1, first answer right 9%\. .*±0\.11 and ±0\.13 at 95%/,
  );
  assert.deepEqual(smoothed([0, 3, 0, 3]), [1.5, 1, 2, 1.5]);
});

test('the report shows the headline first and the smoothed reward curve', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-report-'));
  const cfg = loadConfig({ env: {}, sets: [`state_dir=${dir}`] });
  mkdirSync(path.join(dir, 'runs', 'd1'), { recursive: true });
  writeFileSync(path.join(dir, 'runs', 'd1', 'metrics.jsonl'), DEMO_ROWS.map((r) => JSON.stringify(r)).join('\n'));
  const html = readFileSync(await writeReport(cfg, 'd1'), 'utf8');
  const headline = html.indexOf('<h2>held-out eval reward: 0.16 before → 0.59 after');
  assert.ok(headline > 0 && headline < html.indexOf('<figure>'), 'the eval headline comes before the plots');
  assert.match(html, /training reward per step \(noisy; line: 3-step mean\)/);
  assert.equal((html.match(/stroke="#dc2626"/g) ?? []).length, 1, 'one smoothed line, on the reward plot');
});

test('headless Chromium renders the report', {
  skip: CHROMIUM ? false : "no Chromium here (scripts/test.sh installs Debian's chromium as root)",
}, async () => {
  const { file, dir } = await fakeRun();
  const png = path.join(dir, 'report.png');
  const res = spawnSync(
    CHROMIUM!,
    [
      ...CHROMIUM_ARGS,
      `--user-data-dir=${path.join(dir, 'profile')}`,
      '--window-size=1200,900',
      `--screenshot=${png}`,
      `file://${file}`,
    ],
    { encoding: 'utf8', timeout: 120_000 },
  );
  assert.ok(existsSync(png), `no screenshot: ${res.stderr}`);
  const bytes = readFileSync(png);
  assert.deepEqual([...bytes.subarray(1, 4)].map((c) => String.fromCharCode(c)).join(''), 'PNG');
  assert.ok(statSync(png).size > 10_000, 'the screenshot has content');
  console.log(`report screenshot: ${png}`);
});
