// `tempo-rl report`: the HTML page has a plot per metric; headless Chromium renders it to a PNG.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { REPORT_PLOTS, writeReport } from '../../lib/report.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find((p) => existsSync(p));

async function fakeRun(): Promise<{ file: string; dir: string }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-report-'));
  const cfg = loadConfig({ env: {}, sets: [`state_dir=${dir}`] });
  mkdirSync(path.join(dir, 'runs', 'r1'), { recursive: true });
  const rows = [0, 1, 2, 3].map((step) => ({
    step, 'rollout/raw_reward': 0.1 + 0.2 * step, 'rollout/response_len': 40 - step, 'rollout/truncated_ratio': 0.5,
    'train/train_rollout_logprob_abs_diff': 1e-7, 'perf/step_time': 30 + step, 'perf/rollout_tokens_per_second': 12,
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

test('headless Chromium renders the report', { skip: CHROMIUM ? false : 'no Chromium here (scripts/test.sh installs Debian\'s chromium as root)' }, async () => {
  const { file, dir } = await fakeRun();
  const png = path.join(dir, 'report.png');
  const res = spawnSync(CHROMIUM!, [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', `--user-data-dir=${path.join(dir, 'profile')}`,
    '--window-size=1200,900', `--screenshot=${png}`, `file://${file}`,
  ], { encoding: 'utf8', timeout: 120_000 });
  assert.ok(existsSync(png), `no screenshot: ${res.stderr}`);
  const bytes = readFileSync(png);
  assert.deepEqual([...bytes.subarray(1, 4)].map((c) => String.fromCharCode(c)).join(''), 'PNG');
  assert.ok(statSync(png).size > 10_000, 'the screenshot has content');
  console.log(`report screenshot: ${png}`);
});
