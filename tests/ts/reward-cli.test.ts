// tempo-rl score: response on stdin, --json prints {"reward","extracted","label","reason"}.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { REPO_ROOT } from '../../base/paths.js';

const bin = path.join(REPO_ROOT, 'bin', 'tempo-rl');
const score = (stdin: string, ...args: string[]) =>
  spawnSync(bin, ['score', ...args], {
    input: stdin,
    encoding: 'utf8',
    env: { ...process.env, TEMPO_RL_QUIET_BOOTSTRAP: '1' },
  });

test('tempo-rl score --json: 5\\sqrt{3} against 5*sqrt(3) is 1', () => {
  const r = score('so \\boxed{5\\sqrt{3}}\n', '--label', '5*sqrt(3)', '--json');
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { reward: 1, extracted: '5\\sqrt{3}', label: '5*sqrt(3)', reason: 'equal' });
});

// each run starts the whole CLI (seconds), so the remaining cases share as few runs as possible
test('tempo-rl score: tolerance, and a bad tolerance is a usage error', () => {
  const within = score('\\boxed{0.53}', '--label', '8/15', '--tolerance', '0.01', '--json');
  assert.equal(JSON.parse(within.stdout).reward, 1);
  const bad = score('\\boxed{5}', '--label', '5', '--tolerance', '-1');
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /tolerance/);
});

test('tempo-rl score: exact by default, --match rounded on request, an empty label exits 2', () => {
  const exact = JSON.parse(score('\\boxed{8.66}', '--label', '5*sqrt(3)', '--json').stdout);
  assert.deepEqual([exact.reward, exact.reason], [0, 'different values (8.66 vs 8.660254)']);
  const rounded = JSON.parse(score('\\boxed{8.66}', '--label', '5*sqrt(3)', '--match', 'rounded', '--json').stdout);
  assert.equal(rounded.reward, 1);
  const empty = score('\\boxed{5}', '--label', '', '--json');
  assert.equal(empty.status, 2);
  assert.match(empty.stderr, /--label: label is empty/);
  assert.equal(empty.stdout, '');
});
