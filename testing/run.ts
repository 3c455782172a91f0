// Test support for training runs: a real server, real engines (the suite's, or started here), and
// both workers as child processes so a test can SIGKILL them (the rollout worker is the tests' own,
// testing/rollout-worker.ts: the product's with the test workflows, activities and environments).
import { spawn, type ChildProcess } from 'node:child_process';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import type { Client } from '@temporalio/client';
import type { TempoConfig } from '../config/schema.js';
import { REPO_ROOT } from '../base/paths.js';
import { runProgress, startOrContinueRun } from '../client/run-client.js';
import { connectClient } from '../supervise/temporal.js';
import { waitFor } from '../supervise/process.js';
import { activeTrainerPid, readyTrainerStandbys, trainerCommand } from '../supervise/trainer-process.js';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { trainingRunWorkflowId, type RunProgress, type RunResult } from '../protocol/training-run.js';
import { readStepRecords } from '../activities/run.js';
import { startTestServer, stopChild, type TestServer } from './temporal.js';
import { type TestEngines, testEngines } from './engines.js';
import { TEST_ROLLOUT_WORKER } from './rollout-worker.js';

export interface RunFixture {
  server: TestServer;
  cfg: TempoConfig;
  client: Client;
  rollout: ChildProcess;
  /** Starts one more trainer process (on another "host" when the fixture was given trainerStateDir). */
  startTrainer(): ChildProcess;
  /** The trainer processes: 1 + run.trainer_standbys (one active, the others standing by). */
  trainers: ChildProcess[];
  startRollout(): ChildProcess;
  /** SIGKILLs the active trainer (the one holding the stack's trainer lock) and starts a process in its
   *  place, which stands by while another lives; returns the pid killed. */
  killTrainer(): Promise<number>;
  close(): Promise<void>;
}

/** Small, fast run settings for tests on 2 CPU cores. */
export const SMALL_RUN = [
  'dataset.kind=synthetic',
  'dataset.synthetic_size=16',
  'rollout.prompts_per_step=2',
  'rollout.n_samples_per_prompt=2',
  'rollout.max_turns=2',
  'rollout.max_response_len=16',
  'rollout.max_context_len=2048',
  'rollout.concurrency=4',
  'run.steps=2',
  'run.eval_interval=0',
  'grpo.lr=1e-4',
  // A standby trainer costs a Python start-up per fixture: the tests that kill the trainer ask for one.
  'run.trainer_standbys=0',
];

/** `engines`: the caller's (kept running by close()); else one engine of the suite's or started here.
 *  `trainerStateDir`: each trainer process gets the state directory it returns instead of the stack's
 *  (a trainer on another host, sharing only Temporal and the blob store). */
export async function startRunFixture(
  sets: string[] = [],
  given?: TestEngines,
  opts: {
    trainerStateDir?: () => string;
    /** More environment for the rollout worker and the trainer processes, given the stack's config. */
    workerEnv?: (cfg: TempoConfig) => NodeJS.ProcessEnv;
    trainerEnv?: (cfg: TempoConfig) => NodeJS.ProcessEnv;
  } = {},
): Promise<RunFixture> {
  const engines = given ?? (await testEngines(1));
  const server = await startTestServer([...SMALL_RUN, `engines.urls=${JSON.stringify(engines.urls)}`, ...sets]);
  const cfg = server.cfg;
  const workerDir = path.join(server.stateDir, 'workers');
  mkdirSync(workerDir, { recursive: true });
  const cfgFile = path.join(workerDir, 'config.json');
  writeFileSync(cfgFile, JSON.stringify(cfg));
  const env = { ...process.env, TEMPORAL_ADDRESS: '', ...opts.workerEnv?.(cfg) };
  const startRollout = () =>
    spawn(process.execPath, ['--import', 'tsx', TEST_ROLLOUT_WORKER, cfgFile], {
      cwd: REPO_ROOT,
      env,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  const startTrainer = () => {
    const {
      cmd,
      args,
      env: tenv,
    } = trainerCommand(opts.trainerStateDir ? { ...cfg, state_dir: opts.trainerStateDir() } : cfg);
    return spawn(cmd, args, {
      cwd: REPO_ROOT,
      env: { ...tenv, ...opts.trainerEnv?.(cfg) },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  };
  const fx: RunFixture = {
    server,
    cfg,
    client: await connectClient(cfg),
    rollout: startRollout(),
    trainers: Array.from({ length: 1 + cfg.run.trainer_standbys }, startTrainer),
    startRollout,
    startTrainer,
    killTrainer: async () => {
      let pid: number | null = null;
      await waitFor(async () => (pid = activeTrainerPid(cfg)) !== null, 'an active trainer', 600_000, 50);
      const i = fx.trainers.findIndex((t) => t.pid === pid);
      assert.ok(i >= 0, `the active trainer ${pid} is one of the fixture's`);
      fx.trainers[i]!.kill('SIGKILL');
      fx.trainers[i] = startTrainer();
      return pid!;
    },
    close: async () => {
      await Promise.all([stopChild(fx.rollout), ...fx.trainers.map((t) => stopChild(t))]);
      await server.stop();
      if (!given) await engines.stop();
    },
  };
  return fx;
}

/** Starts run `runId` once the stack is whole: its standby trainers ready (imports done, on the lock). */
export async function startWhenReady(fx: RunFixture, runId: string): Promise<void> {
  await waitFor(
    async () => readyTrainerStandbys(fx.cfg).length >= fx.cfg.run.trainer_standbys,
    'the standby trainers to be ready',
    600_000,
    100,
  );
  await startOrContinueRun(fx.client, fx.cfg, runId);
}

/** A run fixture on the demo's settings (configs/cpu-tiny.yaml: dataset, rollout, grpo, run and the
 *  engines' context), then `sets`. */
export function startDemoRunFixture(sets: string[] = []): Promise<RunFixture> {
  const demo = YAML.parse(readFileSync(path.join(REPO_ROOT, 'configs', 'cpu-tiny.yaml'), 'utf8')) as Record<
    string,
    Record<string, unknown>
  >;
  const sections = ['dataset', 'rollout', 'grpo', 'run'].map((k) => `${k}=${JSON.stringify(demo[k])}`);
  return startRunFixture([...sections, `engines.max_model_len=${demo.engines!.max_model_len}`, ...sets]);
}

/** The histories of a run's workflow, oldest first: each step is a workflow run of its own (continue-as-new). */
export async function runHistories(client: Client, runId: string): Promise<History[]> {
  const out: History[] = [];
  for (let run: string | undefined = undefined; ; ) {
    const history = await client.workflow.getHandle(trainingRunWorkflowId(runId), run).fetchHistory();
    out.unshift(history);
    run = history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
    if (!run) return out;
  }
}

/** Polls the run's progress query until `pred` holds. */
export async function waitForProgress(
  client: Client,
  runId: string,
  pred: (p: RunProgress) => boolean,
  what: string,
  timeoutMs = 600_000,
): Promise<RunProgress> {
  const deadline = Date.now() + timeoutMs;
  let last: RunProgress | null = null;
  while (Date.now() < deadline) {
    try {
      last = await runProgress(client, runId);
      if (pred(last)) return last;
    } catch {
      /* not started yet, or the server is restarting */
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`timed out waiting for ${what}; last progress ${JSON.stringify(last)}`);
}

/** The exactly-once checks of a finished run: every sample consumed by exactly one train step, each
 * step's optimizer updates applied once, no finished episode generated twice. */
export async function checkExactlyOnce(
  client: Client,
  cfg: TempoConfig,
  runId: string,
  result: RunResult,
): Promise<void> {
  assert.equal(result.status, 'completed');
  const steps = cfg.run.steps;
  assert.equal(result.steps_done, steps);
  const runDir = path.join(cfg.state_dir, 'runs', runId);
  // The trainer's own record: one committed checkpoint per step, each listing the samples it consumed.
  const ckpts = readdirSync(path.join(runDir, 'checkpoints'))
    .filter((n) => /^step-\d+$/.test(n))
    .sort();
  assert.equal(ckpts.length, steps, `one checkpoint per step: ${ckpts}`);
  const consumed = new Map<string, number>();
  let updates = 0;
  for (const c of ckpts) {
    const meta = JSON.parse(readFileSync(path.join(runDir, 'checkpoints', c, 'meta.json'), 'utf8'));
    for (const ref of meta.sample_refs as string[]) consumed.set(ref, (consumed.get(ref) ?? 0) + 1);
    // Each step applied its own updates once (grpo.ppo_mini_batches × ppo_epochs), never a retry's again.
    updates += meta.metrics['train/updates'] ?? 0; // none on an empty step
    assert.equal(meta.optimizer_steps, updates, `optimizer steps at ${c}`);
  }
  const records = await readStepRecords(runDir);
  assert.deepEqual(
    records.map((r) => r.step),
    Array.from({ length: steps }, (_, i) => i),
  );
  const expected = cfg.rollout.prompts_per_step * cfg.rollout.n_samples_per_prompt;
  for (const r of records) assert.equal(r.episodes.length, expected, `episodes of step ${r.step}`);
  for (const ref of consumed.keys()) assert.match(ref, new RegExp(`samples/${runId}/`));
  assert.ok(
    [...consumed.values()].every((n) => n === 1),
    'every sample consumed by exactly one train step',
  );
  const trained = records.flatMap((r) => r.episodes.filter((e) => e.trained).map((e) => e.episode_id));
  assert.equal(new Set(trained).size, trained.length);
  assert.equal(consumed.size, trained.length);
  // No finished episode ran twice: each episode workflow id has exactly one completed execution.
  const completed = new Map<string, number>();
  for await (const wf of client.workflow.list({
    query: `WorkflowType = 'episode' AND ExecutionStatus = 'Completed'`,
  })) {
    if (wf.workflowId.startsWith(`episode/${runId}/`))
      completed.set(wf.workflowId, (completed.get(wf.workflowId) ?? 0) + 1);
  }
  assert.equal(completed.size, steps * expected);
  assert.ok(
    [...completed.values()].every((n) => n === 1),
    'no episode completed twice',
  );
}
