// Kill points (supervise/kill-points.ts): the variable is read strictly, a point fires at its nth
// arrival only, and once across processes (its file), with a real SIGKILL.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { KILL_AT_ENV, killPointsFromEnv } from '../../supervise/kill-points.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-kill-points-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('TEMPO_RL_KILL_AT: unset is none; bad JSON, unknown keys, a mid without after_ms and a point no worker reaches are refused by name', () => {
  assert.deepEqual(killPointsFromEnv({}), []);
  assert.throws(() => killPointsFromEnv({ [KILL_AT_ENV]: '{' }), /TEMPO_RL_KILL_AT is not JSON/);
  assert.throws(
    () =>
      killPointsFromEnv({
        [KILL_AT_ENV]: JSON.stringify([{ point: 'generateTurn', phase: 'start', once: 'f', when: 1 }]),
      }),
    /TEMPO_RL_KILL_AT.*when/s,
  );
  assert.throws(
    () => killPointsFromEnv({ [KILL_AT_ENV]: JSON.stringify([{ point: 'generateTurn', phase: 'mid', once: 'f' }]) }),
    /phase mid needs after_ms/,
  );
  assert.equal(
    killPointsFromEnv({ [KILL_AT_ENV]: JSON.stringify([{ point: 'train_step', phase: 'end', once: 'f' }]) })[0]!.nth,
    1,
  );
  // a misspelt point would never fire: a certification run would pass without its kill
  assert.throws(
    () => killPointsFromEnv({ [KILL_AT_ENV]: JSON.stringify([{ point: 'generateTurns', phase: 'end', once: 'f' }]) }),
    /point "generateTurns" is reached by no worker.*generateTurn,/,
  );
});

/** A process that reaches point `p` three times, printing each arrival it survives. */
function reachThrice(once: string, nth: number) {
  const script = `import { KillPoints, killPointsFromEnv } from './supervise/kill-points.ts';
const k = new KillPoints(killPointsFromEnv());
for (let i = 1; i <= 3; i++) { k.reach('continue_as_new'); console.log('survived', i); }`;
  return spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: path.resolve(import.meta.dirname, '..', '..'),
    env: { ...process.env, [KILL_AT_ENV]: JSON.stringify([{ point: 'continue_as_new', phase: 'start', nth, once }]) },
    encoding: 'utf8',
  });
}

test('a point SIGKILLs its process at the nth arrival, once across processes', () => {
  const once = path.join(dir, 'p.fired');
  const first = reachThrice(once, 2);
  assert.equal(first.signal, 'SIGKILL');
  assert.match(first.stdout, /survived 1\n$/);
  assert.ok(existsSync(once));
  const second = reachThrice(once, 2);
  assert.equal(second.status, 0, 'the process started in its place is not killed again');
  assert.match(second.stdout, /survived 3/);
});
