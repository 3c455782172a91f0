// The shell scripts and bad input: gpu-check.sh checks its OUTDIR and phases before anything runs and
// exits non-zero when a phase fails; bootstrap.sh stops at a failed step (a failed uv sync is not
// stamped as installed, even sourced as `source bootstrap.sh || exit 1`, which turns set -e off) and
// reads TEMPO_RL_OFFLINE by the rule TypeScript reads booleans with; offline-install.sh under sh says
// to use bash. Each script runs with traps for npm, uv and pip where a network tool must not run.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { ConfigError, parseBoolVar } from '../../config/load.js';
import { REPO_ROOT } from '../../base/paths.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-scripts-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const fresh = (name: string) => {
  const d = path.join(tmp, `${name}-${++n}`);
  mkdirSync(d, { recursive: true });
  return d;
};

/** A folder of stand-ins for npm, uv and pip that log their call and fail like a host without network. */
function traps(): { bin: string; log: string } {
  const bin = fresh('traps');
  const log = path.join(bin, 'calls.log');
  for (const tool of ['npm', 'npx', 'uv', 'pip', 'pip3']) {
    writeFileSync(
      path.join(bin, tool),
      `#!/bin/sh\necho "${tool} $*" >> '${log}'\necho "error: ${tool}: network unreachable" >&2\nexit 2\n`,
    );
    chmodSync(path.join(bin, tool), 0o755);
  }
  return { bin, log };
}

/** Bash with bootstrap's environment emptied: a cache of its own (nothing installed in it), traps first on PATH. */
function bash(script: string, env: Record<string, string> = {}, cwd = REPO_ROOT) {
  const t = traps();
  const cache = fresh('cache');
  const tiny = fresh('tiny-model');
  writeFileSync(path.join(tiny, '.complete'), '');
  const base = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^TEMPO_RL_(PYTHON|VENV|UV|TEMPORAL_BIN|OFFLINE|CACHE)$/.test(k)),
  );
  const res = spawnSync('bash', ['-c', script], {
    cwd,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...base, PATH: `${t.bin}:${process.env.PATH}`, TEMPO_RL_CACHE: cache, TEMPO_RL_TINY_MODEL: tiny, ...env },
  });
  return { ...res, calls: existsSync(t.log) ? readFileSync(t.log, 'utf8') : '', cache };
}

const BOOTSTRAP = `source ${JSON.stringify(path.join(REPO_ROOT, 'scripts/bootstrap.sh'))} || exit 1; echo sourced`;
const stamps = (cache: string) =>
  readdirSync(cache)
    .filter((d) => d.startsWith('venv-'))
    .filter((d) => existsSync(path.join(cache, d, '.tempo-rl-stamp')));

describe('bootstrap.sh', () => {
  test('a failed uv sync stops it, unstamped, though sourced as `source bootstrap.sh || exit 1`', () => {
    const r = bash(BOOTSTRAP);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.calls, /^uv sync --frozen/m);
    assert.match(r.stderr, /uv sync --frozen failed .*is not installed/);
    assert.doesNotMatch(r.stdout, /sourced/);
    assert.deepEqual(stamps(r.cache), [], 'no environment is stamped as installed');
  });
  for (const value of ['true', 'yes', 'On', ' 1 '])
    test(`TEMPO_RL_OFFLINE=${JSON.stringify(value)} is offline: no npm, uv or pip`, () => {
      const r = bash(BOOTSTRAP, { TEMPO_RL_OFFLINE: value });
      assert.equal(r.status, 1, r.stderr);
      assert.equal(r.calls, '', 'a network tool ran');
      assert.match(r.stderr, /is missing and the offline pack lacks it/);
      assert.deepEqual(
        readdirSync(r.cache).filter((d) => d !== 'npm'),
        [],
        'nothing half-made in the cache',
      );
    });
  test('TEMPO_RL_OFFLINE=maybe is refused, naming the value', () => {
    const r = bash(BOOTSTRAP, { TEMPO_RL_OFFLINE: 'maybe' });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /TEMPO_RL_OFFLINE="maybe": expected 1, true, yes or on, or 0, false, no, off or empty/);
    assert.equal(r.calls, '');
  });
  test('booleans in the environment: one rule in bash (scripts/env-bool.sh) and TypeScript (parseBoolVar)', () => {
    const values = [
      '1',
      '0',
      'true',
      'TRUE',
      'yes',
      'Yes',
      'on',
      'ON',
      'false',
      'no',
      'off',
      'Off',
      ' on ',
      'y',
      'maybe',
      '2',
    ];
    const script = `source scripts/env-bool.sh; for v in "$@"; do X="$v"; env_bool X 2>/dev/null; echo $?; done`;
    const res = spawnSync('bash', ['-c', script, 'bash', ...values], { cwd: REPO_ROOT, encoding: 'utf8' });
    const inBash = res.stdout.trim().split('\n');
    values.forEach((v, i) => {
      let ts: string;
      try {
        ts = parseBoolVar('X', v) ? '0' : '1';
      } catch (err) {
        assert.ok(err instanceof ConfigError);
        ts = '2';
      }
      assert.equal(inBash[i], ts, `X=${JSON.stringify(v)}: bash says ${inBash[i]}, TypeScript ${ts}`);
    });
  });
});

const GPU_CHECK = path.join(REPO_ROOT, 'scripts/gpu-check.sh');
// Offline with an empty cache: bootstrap (had the script reached it) stops at once, so a check that
// fails to stop the script first cannot run a phase here.
const SAFE = { TEMPO_RL_OFFLINE: '1' };

describe('gpu-check.sh: usage and OUTDIR checked before anything runs', () => {
  const cases: Array<[string, string[], RegExp]> = [
    ['no OUTDIR', [], /^usage: scripts\/gpu-check\.sh OUTDIR/],
    ['an OUTDIR under a regular file', ['afile/sub', 'stop'], /cannot make OUTDIR "afile\/sub": .*Not a directory/],
    ['an unknown phase', ['out', 'stop', 'rm'], /unknown phase "rm"/],
    ['an empty OUTDIR', [''], /OUTDIR "" is not a folder name/],
  ];
  for (const [kind, args, says] of cases)
    test(kind, () => {
      const cwd = fresh('cwd');
      writeFileSync(path.join(cwd, 'afile'), 'mine');
      const r = bash(
        `bash ${JSON.stringify(GPU_CHECK)} "$@"`.replace('"$@"', args.map((a) => JSON.stringify(a)).join(' ')),
        SAFE,
        cwd,
      );
      assert.equal(r.status, 2, r.stderr);
      assert.match(r.stderr, says);
      assert.doesNotMatch(r.stderr, /\[bootstrap\]|\[gpu-check/, 'it went on');
      assert.equal(readFileSync(path.join(cwd, 'afile'), 'utf8'), 'mine');
      assert.deepEqual(readdirSync(cwd).sort(), ['afile'], 'nothing written');
    });
  test('a relative OUTDIR is where the script was started; a failed phase is exit 1', { timeout: 120_000 }, () => {
    const cwd = fresh('cwd');
    // engines needs the models phase's models: it fails at once; stop runs all the same
    const r = spawnSync('bash', [GPU_CHECK, 'rel/out', 'engines', 'stop'], { cwd, encoding: 'utf8', timeout: 110_000 });
    assert.equal(r.status, 1, r.stderr);
    const summary = readFileSync(path.join(cwd, 'rel/out/summary.log'), 'utf8');
    assert.match(summary, /engines: FAILED/);
    assert.match(summary, /stop: ok/);
    assert.match(summary, /failed: engines/);
    assert.ok(!existsSync(path.join(REPO_ROOT, 'rel')), 'OUTDIR landed inside the clone');
  });
});

test('offline-install.sh under sh: a sentence saying to use bash', () => {
  const r = spawnSync('sh', [path.join(REPO_ROOT, 'scripts/offline-install.sh')], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^offline-install\.sh: run it with bash/);
});
