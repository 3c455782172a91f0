// Test support: a real Temporal dev server (own port, own SQLite file) and real workers.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Worker } from '@temporalio/worker';
import { loadConfig } from '../config/load.js';
import type { TempoConfig } from '../config/schema.js';
import { startServer, stopServer } from '../supervise/server.js';
import { freePorts } from '../supervise/process.js';
import { REPO_ROOT } from '../base/paths.js';
import { environmentWorkerCommand } from '../supervise/environment-worker.js';
import { trainerCommand } from '../supervise/trainer-process.js';
import { createTestRolloutWorker } from './rollout-worker.js';
import { removeTestState } from './state.js';
import type { RolloutDeps } from '../activities/index.js';

export interface TestServer {
  cfg: TempoConfig;
  stateDir: string;
  stop(): Promise<void>;
}

/** A fresh dev server on free ports with its SQLite file in a temp state dir (removed by stop() when
 *  created here). */
export async function startTestServer(sets: string[] = [], stateDir?: string): Promise<TestServer> {
  const dir = stateDir ?? mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-test-'));
  const [port, ui] = (await freePorts(2)) as [number, number];
  const env = { ...process.env };
  delete env.TEMPORAL_ADDRESS;
  const cfg = loadConfig({
    env,
    sets: [`state_dir=${dir}`, `server.port=${port}`, `server.ui_port=${ui}`, ...sets],
  });
  await startServer(cfg);
  return {
    cfg,
    stateDir: dir,
    stop: async () => {
      await stopServer(cfg);
      if (!stateDir) removeTestState(dir);
    },
  };
}

export interface RunningWorker {
  worker: Worker;
  done: Promise<void>;
  stop(): Promise<void>;
}

/** The tests' rollout worker (testing/rollout-worker.ts) in this process. */
export async function startRolloutWorker(cfg: TempoConfig, deps?: RolloutDeps): Promise<RunningWorker> {
  const worker = await createTestRolloutWorker(cfg, deps);
  const done = worker.run();
  return {
    worker,
    done,
    stop: async () => {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await done.catch(() => undefined);
    },
  };
}

export const TEST_TRAINER_WORKER = path.join(REPO_ROOT, 'testing', 'trainer_worker.py');

/** The command of the tests' trainer worker (testing/trainer_worker.py): the product's, with the
 *  tests' entry point in place of `-m trainer.worker` (the same flags; under torchrun too). */
export function testTrainerCommand(cfg: TempoConfig): ReturnType<typeof trainerCommand> {
  const command = trainerCommand(cfg);
  const at = command.args.indexOf('trainer.worker');
  if (at < 1 || command.args[at - 1] !== '-m') throw new Error(`no -m trainer.worker in ${command.args.join(' ')}`);
  return { ...command, args: [...command.args.slice(0, at - 1), TEST_TRAINER_WORKER, ...command.args.slice(at + 1)] };
}

/** The tests' trainer worker (testTrainerCommand) as a child process (SIGKILL-able). */
export function startTrainerWorker(cfg: TempoConfig): ChildProcess {
  const { cmd, args, env } = testTrainerCommand(cfg);
  const child = spawn(cmd, args, { env, cwd: REPO_ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
  return child;
}

/** The Python environment worker as a child process (SIGKILL-able), once it polls its queue. Its
 *  harness programs run in their own process groups: a SIGKILLed worker leaves none polling. */
export function startEnvironmentWorker(cfg: TempoConfig, pythonPath: string[] = []): Promise<ChildProcess> {
  const { cmd, args, env } = environmentWorkerCommand(cfg);
  const withPath = { ...env, PYTHONPATH: [...pythonPath, env.PYTHONPATH].filter(Boolean).join(':') };
  const child = spawn(cmd, args, { env: withPath, cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      if (!d.toString().includes('"environment_worker": "ready"')) return;
      // Nothing else comes on stdout; a harness program it started may hold the pipe past its exit.
      child.stdout!.destroy();
      resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`the environment worker exited before it was ready (${code})`)));
  });
}

export async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}
