// A foreground run's stack is checked before it starts and watched while the command waits
// (supervise/preflight.ts, supervise/watch.ts): a dead worker or a silent engine is named within
// seconds and the command exits non-zero, instead of waiting forever.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { REPO_ROOT } from '../../base/paths.js';
import { stateLayout } from '../../stores/layout.js';
import { visibleGpus } from '../../supervise/gpus.js';
import { preflight } from '../../supervise/preflight.js';
import { isAlive } from '../../supervise/process.js';
import { watchStack } from '../../supervise/watch.js';
import { freePort } from '../../testing/bad-input.js';
import { healthStub } from '../../testing/health-stub.js';
import { removeTestState } from '../../testing/state.js';

const dirs: string[] = [];
const children: number[] = [];
after(() => {
  for (const pid of children) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
  for (const d of dirs) removeTestState(d);
});
const stateDir = () => {
  const d = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-watch-'));
  dirs.push(d);
  return d;
};

/** A process whose command line looks like a worker of `kind`, living `ms`. */
function fakeWorker(kind: 'rollout' | 'trainer', ms: number): number {
  const tag = kind === 'rollout' ? ['worker', 'rollout'] : ['trainer.worker'];
  const child = spawn(process.execPath, ['-e', `setTimeout(() => {}, ${ms})`, ...tag], { stdio: 'ignore' });
  children.push(child.pid!);
  return child.pid!;
}

function recordWorker(state: string, kind: 'rollout' | 'trainer', pid: number, logText: string): string {
  const dir = stateLayout(state).workers;
  mkdirSync(dir, { recursive: true });
  const log = path.join(dir, `${kind}.log`);
  writeFileSync(log, logText);
  writeFileSync(path.join(dir, `${kind}.json`), JSON.stringify({ pid, pids: [pid], log }));
  return log;
}

test('a worker that dies while a run is followed is named, with the end of its log, within seconds', async () => {
  const engine = await healthStub();
  const state = stateDir();
  const cfg = loadConfig({ env: {}, sets: [`state_dir=${state}`, `engines.urls=["${engine.url}"]`] });
  const rollout = fakeWorker('rollout', 800);
  recordWorker(state, 'rollout', rollout, 'starting\nError: the workflow bundle failed\n');
  recordWorker(state, 'trainer', fakeWorker('trainer', 60_000), 'ok\n');
  const t0 = Date.now();
  const watch = watchStack(cfg, { intervalMs: 200 });
  try {
    await assert.rejects(watch.failed, (err: Error) => {
      assert.match(err.message, new RegExp(`the rollout worker has exited \\(pid ${rollout}\\)`));
      assert.match(err.message, /rollout\.log:\nstarting\nError: the workflow bundle failed/);
      return true;
    });
    assert.ok(Date.now() - t0 < 5_000, `${Date.now() - t0} ms`);
  } finally {
    watch.stop();
    await engine.close();
  }
});

test('an engine that stops answering is warned of at once and fails the command after the grace', async () => {
  const engine = await healthStub();
  const state = stateDir();
  const cfg = loadConfig({ env: {}, sets: [`state_dir=${state}`, `engines.urls=["${engine.url}"]`] });
  recordWorker(state, 'rollout', fakeWorker('rollout', 60_000), '');
  recordWorker(state, 'trainer', fakeWorker('trainer', 60_000), '');
  const warnings: string[] = [];
  const watch = watchStack(cfg, { intervalMs: 200, engineGraceMs: 1_000, warn: (l) => warnings.push(l) });
  await engine.close();
  try {
    await assert.rejects(watch.failed, new RegExp(`engine ${engine.url} has not answered for 1 s .*ECONNREFUSED`));
    assert.match(warnings[0] ?? '', new RegExp(`warning: engine ${engine.url} does not answer .*ECONNREFUSED`));
  } finally {
    watch.stop();
  }
});

test('before a stack starts: silent engines.urls, a kill point no worker reaches, GPUs the machine lacks', async () => {
  const port = await freePort();
  const cfg = loadConfig({ env: {}, sets: [`state_dir=${stateDir()}`, `engines.urls=["http://127.0.0.1:${port}"]`] });
  await assert.rejects(
    preflight(cfg, {}),
    new RegExp(
      `engines\\.urls: http://127\\.0\\.0\\.1:${port} does not answer \\(GET /health: ECONNREFUSED\\); nothing was started`,
    ),
  );
  const kill = JSON.stringify([{ point: 'generateTurns', phase: 'end', once: '/tmp/x' }]);
  await assert.rejects(preflight(cfg, { TEMPO_RL_KILL_AT: kill }), (err: Error & { exitCode?: number }) => {
    assert.equal(err.exitCode, 2);
    assert.match(err.message, /TEMPO_RL_KILL_AT: point "generateTurns" is reached by no worker/);
    return true;
  });
  if (visibleGpus().count === 0)
    await assert.rejects(
      preflight(
        loadConfig({ env: {}, sets: [`state_dir=${stateDir()}`, 'model.num_gpus=1', 'run.trainer_standbys=0'] }),
        {
          CUDA_VISIBLE_DEVICES: '',
        },
      ),
      /model\.num_gpus is 1, but this machine shows no GPU .*CUDA_VISIBLE_DEVICES=""/,
    );
});

test('train exits non-zero, naming the rollout worker, when the worker dies as the run starts', {
  timeout: 180_000,
}, async () => {
  const engine = await healthStub();
  const state = stateDir();
  const config = path.join(state, 'run.yaml');
  writeFileSync(config, 'run:\n  steps: 1\n');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPO_RL_STATE_DIR: state,
    TEMPO_RL__LOG_LEVEL: 'warn',
    // the rollout worker SIGKILLs itself at the run's first activity: nothing restarts it
    TEMPO_RL_KILL_AT: JSON.stringify([{ point: 'prepareDataset', phase: 'start', once: path.join(state, 'fired') }]),
  };
  for (const k of Object.keys(env)) if (k.startsWith('TEMPORAL_')) delete env[k];
  const sets = [
    `engines.urls=["${engine.url}"]`,
    `server.port=${await freePort()}`,
    `server.ui_port=${await freePort()}`,
    'run.trainer_standbys=0',
  ].flatMap((s) => ['--set', s]);
  const t0 = Date.now();
  // not spawnSync: the stub engine answers from this process's event loop
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(REPO_ROOT, 'cli', 'main.ts'), ...sets, 'train', config, '--run-id', 'dies'],
    { env, stdio: ['ignore', 'ignore', 'pipe'], timeout: 170_000 },
  );
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const [code] = (await once(child, 'close')) as [number | null];
  const res = { status: code, stderr };
  await engine.close();
  assert.equal(res.status, 1, res.stderr);
  assert.match(res.stderr, /the rollout worker has exited \(pid \d+\)/);
  assert.match(res.stderr, /kill point prepareDataset start/);
  assert.match(res.stderr, /tempo-rl train CONFIG --run-id dies/);
  assert.ok(Date.now() - t0 < 170_000);
  // what the command started is stopped again
  const status = spawnSync(
    process.execPath,
    ['--import', 'tsx', path.join(REPO_ROOT, 'cli', 'main.ts'), ...sets, 'worker', 'status', '--json'],
    { env, encoding: 'utf8' },
  );
  const workers = (JSON.parse(status.stdout) as { workers: Array<{ running: boolean }> }).workers;
  assert.ok(workers.length >= 2 && workers.every((w) => !w.running), status.stdout);
});
