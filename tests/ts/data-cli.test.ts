// tempo-rl data synth and data sft-export, end to end through the command line.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { REPO_ROOT } from '../../base/paths.js';

const bin = path.join(REPO_ROOT, 'bin', 'tempo-rl');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-data-cli-'));
const env = {
  ...process.env,
  TEMPO_RL_QUIET_BOOTSTRAP: '1',
  TEMPO_RL_STATE_DIR: path.join(tmp, 'state'),
  TEMPO_RL_LOG_LEVEL: 'warn',
};
const run = (...args: string[]) => spawnSync(bin, args, { encoding: 'utf8', env });

test('data synth writes a loadable dataset; sft-export formats Answer: \\boxed{…}', () => {
  const out = path.join(tmp, 'synth');
  const synth = run('data', 'synth', '--out', out, '--n', '6', '--seed', '1', '--json');
  assert.equal(synth.status, 0, synth.stderr);
  assert.deepEqual(JSON.parse(synth.stdout), { out, train: 6, test: 4 });
  const file = path.join(tmp, 'sft.jsonl');
  const sft = run(
    '--set',
    'dataset.kind=geo3k_dir',
    '--set',
    `dataset.path=${out}`,
    'data',
    'sft-export',
    '--out',
    file,
    '--json',
  );
  assert.equal(sft.status, 0, sft.stderr);
  assert.equal(JSON.parse(sft.stdout).rows, 6);
  const lines = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.equal(lines.length, 6);
  for (const l of lines) assert.match(l.messages.at(-1).content, /^Answer: \\boxed\{.+\}$/);
});

test('data synth --force replaces its own dataset; sft-export --force overwrites its file', () => {
  const out = path.join(tmp, 'synth-again');
  assert.equal(run('data', 'synth', '--out', out, '--n', '4', '--seed', '1').status, 0);
  const refused = run('data', 'synth', '--out', out, '--n', '2', '--seed', '2');
  assert.equal(refused.status, 2);
  assert.match(refused.stderr, /already holds a tempo-rl data synth output; pass --force/);
  const again = run('data', 'synth', '--out', out, '--n', '2', '--seed', '2', '--force', '--json');
  assert.equal(again.status, 0, again.stderr);
  assert.equal(readFileSync(path.join(out, 'train.jsonl'), 'utf8').trim().split('\n').length, 2);
  const file = path.join(tmp, 'sft-again.jsonl');
  const sets = ['--set', 'dataset.kind=geo3k_dir', '--set', `dataset.path=${out}`];
  assert.equal(run(...sets, 'data', 'sft-export', '--out', file).status, 0);
  assert.equal(run(...sets, 'data', 'sft-export', '--out', file).status, 2);
  assert.equal(run(...sets, 'data', 'sft-export', '--out', file, '--force').status, 0);
});
