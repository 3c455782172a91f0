// Chaos trials: small training runs on the CPU config with two engines, each SIGKILLing
// one random component — rollout worker, trainer, Temporal server, an engine — at a random moment
// (mid-rollout, mid-train, inside a checkpoint save, inside a weight sync), then restarting it. After
// each run: completed, one commit per step, every sample consumed once, no episode run twice, the
// optimizer's step count, finite final weights, every engine on the final version.
// bench/chaos.ts runs N trials and prints the table; tests/ts/chaos.test.ts runs 2.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { runHandle, runProgress, startOrContinueRun } from '../client/run-client.js';
import { serverStatus, startServer } from '../supervise/server.js';
import { seededRandom } from '../lib/prompt-order.js';
import { connectClient } from '../supervise/temporal.js';
import { isAlive, portOpen, waitFor } from '../supervise/process.js';
import type { RunProgress, RunResult } from '../protocol/training-run.js';
import { type TestEngines, testEngines } from './engines.js';
import { readyTrainerStandbys } from '../supervise/trainer-process.js';
import { checkExactlyOnce, SMALL_RUN, startRunFixture, type RunFixture } from './run.js';
import { readStepRecords } from '../activities/run.js';

export const COMPONENTS = ['rollout_worker', 'trainer', 'temporal_server', 'engine'] as const;
export type Component = (typeof COMPONENTS)[number];
type Moment = 'rollout' | 'train' | 'checkpoint_save' | 'sync';
const MOMENTS: Record<Component, Moment[]> = {
  rollout_worker: ['rollout', 'train', 'sync'],
  trainer: ['train', 'checkpoint_save', 'sync'],
  temporal_server: ['rollout', 'train', 'sync'],
  engine: ['rollout', 'sync'],
};
const STEPS = 3;
// Full checkpoints at steps 1 and 2 (the last); step 0 is light, so kills also land between them.
const TRIAL_RUN = [...SMALL_RUN, `run.steps=${STEPS}`, 'run.checkpoint_interval=2', 'run.trainer_standbys=1'];

export interface TrialResult {
  trial: number;
  component: Component;
  moment: string;
  /** false: the run ended before the moment came (no kill). */
  killed: boolean;
  /** Kill → the run moving again (a step, phase or episode further). */
  recovery_s: number | null;
  violations: string[];
  seconds: number;
}

export interface Chaos {
  /** async: the run trains with the async window (rollout.max_staleness 1, TIS on). */
  trial(i: number, opts?: { async?: boolean }): Promise<TrialResult>;
  close(): Promise<void>;
}

const pick = <T>(rng: () => number, xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startChaos(seed: number, components: readonly Component[] = COMPONENTS): Promise<Chaos> {
  const rng = seededRandom(seed); // trials are reproducible by --seed
  // Two engines of its own (one is SIGKILLed and restarted), never the suite's shared ones.
  const engines: TestEngines = await testEngines(2, { own: true });
  let fx: RunFixture;
  try {
    fx = await startRunFixture([...TRIAL_RUN, `engines.urls=${JSON.stringify(engines.urls)}`], engines);
  } catch (err) {
    await engines.stop();
    throw err;
  }
  let client: Client = fx.client;
  let engineRestart: Promise<void> = Promise.resolve();
  const runDirOf = (runId: string) => path.join(fx.cfg.state_dir, 'runs', runId);

  const progress = (runId: string) => runProgress(client, runId).catch(() => null);

  /** Resolves with the progress at the moment, or null if the run finished first. */
  async function reach(runId: string, moment: Moment, step: number): Promise<RunProgress | null> {
    const deadline = Date.now() + 600_000;
    while (Date.now() < deadline) {
      if (moment === 'checkpoint_save') {
        const dir = path.join(runDirOf(runId), 'checkpoints');
        let names: string[] = [];
        try {
          names = readdirSync(dir);
        } catch {}
        if (names.some((n) => n.startsWith(`.tmp-step-${String(step).padStart(6, '0')}-`))) return progress(runId);
        if (names.includes(`step-${String(step).padStart(6, '0')}`)) return null; // committed before we saw it
        await sleep(10);
        continue;
      }
      const p = await progress(runId);
      if (p && p.workflow_status !== 'RUNNING') return null;
      if (p && (p.step > step || (p.step === step && p.phase === moment))) return p.step === step ? p : null;
      await sleep(moment === 'sync' ? 10 : 100);
    }
    return null;
  }

  async function kill(component: Component): Promise<void> {
    if (component === 'rollout_worker') {
      fx.rollout.kill('SIGKILL');
      await sleep(500);
      fx.rollout = fx.startRollout();
    } else if (component === 'trainer') {
      await fx.killTrainer(); // the active one; its standby takes over, the new process stands by
    } else if (component === 'temporal_server') {
      const { pid } = await serverStatus(fx.cfg);
      if (pid) process.kill(pid, 'SIGKILL');
      await sleep(500);
      await startServer(fx.cfg);
      await client.connection.close().catch(() => undefined);
      client = await connectClient(fx.cfg);
    } else {
      // The whole engine (its process group: API server, engine core, workers), as when its host dies;
      // SIGKILL of the API process alone leaves vLLM's engine core and workers running as orphans.
      const i = Math.floor(rng() * engines.urls.length);
      const pid = engines.pids!()[i]!;
      process.kill(-pid, 'SIGKILL');
      // Its engine core and workers hold the listening socket a moment longer than the API process.
      const { port } = new URL(engines.urls[i]!);
      await waitFor(
        async () => !isAlive(pid) && !(await portOpen('127.0.0.1', Number(port), 300)),
        `engine ${engines.urls[i]} to be gone`,
        60_000,
        200,
      );
      engineRestart = engineRestart.catch(() => undefined).then(() => engines.restart!()); // in the background: the run goes on
    }
  }

  async function violations(runId: string, result: RunResult, async: boolean): Promise<string[]> {
    const found: string[] = [];
    if (async) {
      // The trial is about the async window: it must have run in it, within its staleness bound.
      const lags = (await readStepRecords(runDirOf(runId))).map((r) => r.metrics['rollout/staleness_max']);
      if (lags.some((x) => x === undefined))
        found.push('an async trial has steps without staleness metrics (not in async mode)');
      if (lags.some((x) => x !== undefined && x > 1)) found.push(`staleness above rollout.max_staleness 1: ${lags}`);
    }
    try {
      await checkExactlyOnce(client, fx.cfg, runId, result);
    } catch (err) {
      found.push(`exactly once: ${(err as Error).message.split('\n')[0]}`);
    }
    if (result.reason) found.push(`run: ${result.reason}`);
    try {
      const meta = JSON.parse(
        readFileSync(
          path.join(runDirOf(runId), 'checkpoints', `step-${String(STEPS - 1).padStart(6, '0')}`, 'meta.json'),
          'utf8',
        ),
      );
      if (!meta.full) found.push('the last step has no full checkpoint');
      if (!Array.isArray(meta.param_digest)) found.push('the final weights are not finite');
    } catch (err) {
      found.push(`final checkpoint: ${(err as Error).message}`);
    }
    for (const url of engines.urls) {
      const info = await fetch(`${url}/weight_info`)
        .then((r) => r.json() as Promise<{ weight_version?: string }>)
        .catch(() => null);
      if (info?.weight_version !== String(STEPS))
        found.push(`${url} serves version ${info?.weight_version ?? 'none'}, not ${STEPS}`);
    }
    return found;
  }

  return {
    async trial(i, opts = {}) {
      const t0 = Date.now();
      await engineRestart.catch(() => engines.restart!()); // the engine a previous trial killed is back
      // ...and the trainer started in place of one a previous trial killed stands by again
      await waitFor(
        async () => readyTrainerStandbys(fx.cfg).length >= fx.cfg.run.trainer_standbys,
        'a ready trainer standby',
        300_000,
        200,
      );
      const component = pick(rng, components);
      const moment = pick(rng, MOMENTS[component]);
      // A light step's save is a few milliseconds: saves are caught in the full ones (steps 1 and 2).
      const step = moment === 'checkpoint_save' ? 1 + Math.floor(rng() * (STEPS - 1)) : Math.floor(rng() * STEPS);
      const delay = moment === 'rollout' ? rng() * 3000 : moment === 'train' ? rng() * 1500 : 0;
      const runId = `chaos-${seed}-${i}`;
      const cfg = opts.async
        ? {
            ...fx.cfg,
            rollout: { ...fx.cfg.rollout, max_staleness: 1 },
            grpo: { ...fx.cfg.grpo, tis: { ...fx.cfg.grpo.tis, enabled: true } },
          }
        : fx.cfg;
      await startOrContinueRun(client, cfg, runId);
      const at = await reach(runId, moment, step);
      let recovery: number | null = null;
      let killed = false;
      // The delay can outlast the moment (a rollout takes under a second): a kill then lands later in the
      // run, which is still a fault mid-run — except from the last step's sync on, which no sync follows
      // (a restarted engine would serve the base weights, as after any run): no kill there.
      if (at) await sleep(delay);
      const before = at ? await progress(runId) : null;
      if (
        before &&
        before.workflow_status === 'RUNNING' &&
        before.step < STEPS &&
        !(before.step === STEPS - 1 && ['sync', 'eval', 'record', 'idle'].includes(before.phase))
      ) {
        killed = true;
        const tKill = Date.now();
        await kill(component);
        for (let p = await progress(runId); Date.now() - tKill < 900_000; p = await progress(runId)) {
          if (
            p &&
            (p.workflow_status !== 'RUNNING' ||
              p.step > before.step ||
              p.phase !== before.phase ||
              p.episodes_done > before.episodes_done)
          )
            break;
          await sleep(100);
        }
        recovery = (Date.now() - tKill) / 1000;
      }
      const result = (await runHandle(client, runId).result()) as RunResult;
      await engineRestart;
      return {
        trial: i,
        component,
        moment: `${moment} of step ${step}${delay ? ` +${Math.round(delay)} ms` : ''}`,
        killed,
        recovery_s: recovery,
        violations: await violations(runId, result, !!opts.async),
        seconds: (Date.now() - t0) / 1000,
      };
    },
    async close() {
      await engineRestart.catch(() => undefined);
      await fx.close();
      await engines.stop();
    },
  };
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]! : Number.NaN;
};

/** The table: trials, kills and recovery p50/p95 per component, violations. */
export function chaosTable(results: TrialResult[]): string {
  const lines = [
    '| component | trials | kills | recovery p50 (s) | recovery p95 (s) | violations |',
    '| --- | --- | --- | --- | --- | --- |',
  ];
  for (const c of COMPONENTS) {
    const rs = results.filter((r) => r.component === c);
    if (!rs.length) continue;
    const rec = rs.flatMap((r) => (r.recovery_s === null ? [] : [r.recovery_s]));
    lines.push(
      `| ${c} | ${rs.length} | ${rs.filter((r) => r.killed).length} | ${quantile(rec, 0.5).toFixed(1)} | ${quantile(rec, 0.95).toFixed(1)} | ${rs.reduce((n, r) => n + r.violations.length, 0)} |`,
    );
  }
  const v = results.reduce((n, r) => n + r.violations.length, 0);
  lines.push('', `${results.length} trials, ${results.filter((r) => r.killed).length} kills, ${v} violations`);
  for (const r of results)
    for (const x of r.violations) lines.push(`  trial ${r.trial} (${r.component}, ${r.moment}): ${x}`);
  return lines.join('\n');
}
