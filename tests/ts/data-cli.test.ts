// tempo-rl data synth and data sft-export, end to end through the command line.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { REPO_ROOT } from '../../lib/paths.js';

const bin = path.join(REPO_ROOT, 'bin', 'tempo-rl');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-data-cli-'));
const env = { ...process.env, TEMPO_RL_QUIET_BOOTSTRAP: '1', TEMPO_RL_STATE_DIR: path.join(tmp, 'state'), TEMPO_RL_LOG_LEVEL: 'warn' };
const run = (...args: string[]) => spawnSync(bin, args, { encoding: 'utf8', env });

test('data synth writes a loadable dataset; sft-export formats Answer: \\boxed{…}', () => {
  const out = path.join(tmp, 'synth');
  const synth = run('data', 'synth', '--out', out, '--n', '6', '--seed', '1', '--json');
  assert.equal(synth.status, 0, synth.stderr);
  assert.deepEqual(JSON.parse(synth.stdout), { out, train: 6, test: 4 });
  const file = path.join(tmp, 'sft.jsonl');
  const sft = run('--set', 'dataset.kind=geo3k_dir', '--set', `dataset.path=${out}`, 'data', 'sft-export', '--out', file, '--json');
  assert.equal(sft.status, 0, sft.stderr);
  assert.equal(JSON.parse(sft.stdout).rows, 6);
  const lines = readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, 6);
  for (const l of lines) assert.match(l.messages.at(-1).content, /^Answer: \\boxed\{.+\}$/);
});
