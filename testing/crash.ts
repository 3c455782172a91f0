// Crash tests of real training runs (run-crash.test.ts, long/run-crash.test.ts): a run on a fixture of
// its own, SIGKILLs mid-run, and the exactly-once checks of the finished run.
import path from 'node:path';
import { runHandle } from '../client/run-client.js';
import { serverStatus, startServer } from '../supervise/server.js';
import { connectClient } from '../supervise/temporal.js';
import type { RunProgress, RunResult } from '../protocol/training-run.js';
import { checkExactlyOnce, startRunFixture, startWhenReady, waitForProgress, type RunFixture } from './run.js';

/** Kill → the run moving again, per component, in seconds (each file prints its own). */
export const recoveries: Record<string, number> = {};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** runProgress says how the workflow stands; waitForProgress hands it on typed as the query's answer. */
const running = (p: RunProgress) => (p as RunProgress & { workflow_status?: string }).workflow_status === 'RUNNING';

/** `then` checks the finished run's state directory (the fixture removes it afterwards). */
export async function runWithCrash(
  name: string,
  crash: (fx: RunFixture, runId: string) => Promise<void>,
  opts: { sets?: string[]; then?: (runDir: string, fx: RunFixture) => void | Promise<void> } = {},
): Promise<void> {
  const fx = await startRunFixture(opts.sets);
  try {
    const runId = `crash-${name}`;
    await startWhenReady(fx, runId);
    await crash(fx, runId);
    const client = await connectClient(fx.cfg);
    const result = (await runHandle(client, runId).result()) as RunResult;
    await checkExactlyOnce(client, fx.cfg, runId, result);
    await opts.then?.(path.join(fx.cfg.state_dir, 'runs', runId), fx);
  } finally {
    await fx.close();
  }
}

/** SIGKILLs the rollout worker while the episodes of `step` run, starts a new one, and waits until the
 *  run moves again. */
export async function killRolloutWorker(fx: RunFixture, runId: string, step: number): Promise<void> {
  await waitForProgress(
    fx.client,
    runId,
    (p) => p.phase === 'rollout' && p.step === step,
    `the episodes of step ${step}`,
  );
  await sleep(1500); // episodes mid-turn
  fx.rollout.kill('SIGKILL');
  const t0 = Date.now();
  await sleep(1000);
  fx.rollout = fx.startRollout();
  const before = (await waitForProgress(fx.client, runId, () => true, 'progress')).episodes_done;
  await waitForProgress(
    fx.client,
    runId,
    (p) => p.episodes_done > before || p.phase !== 'rollout',
    'the new worker to make progress',
  );
  recoveries.rollout_worker = (Date.now() - t0) / 1000;
}

/** SIGKILLs the Temporal server once the run is in `step` (in `phase` when given; mid-turn when it is
 *  rolling out), restarts it, and waits until the run moves again (fx.client is connected anew). */
export async function killTemporalServer(fx: RunFixture, runId: string, step: number, phase?: string): Promise<void> {
  const at = await waitForProgress(
    fx.client,
    runId,
    (p) => !running(p) || p.step > step || (p.step === step && (!phase || p.phase === phase)),
    `step ${step}${phase ? ` (${phase})` : ''}`,
  );
  if (!running(at) || at.step > step)
    throw new Error(`the run left step ${step} before the kill: ${JSON.stringify(at)}`);
  if (at.phase === 'rollout') await sleep(1500); // episodes mid-turn
  const { pid } = await serverStatus(fx.cfg);
  if (!pid) throw new Error('the Temporal server has no pid to kill');
  process.kill(pid, 'SIGKILL');
  const t0 = Date.now();
  await sleep(1000);
  await startServer(fx.cfg);
  await fx.client.connection.close().catch(() => undefined);
  fx.client = await connectClient(fx.cfg);
  const before = await waitForProgress(fx.client, runId, () => true, 'the server to answer');
  await waitForProgress(
    fx.client,
    runId,
    (p) => p.episodes_done > before.episodes_done || p.phase !== before.phase || p.step > before.step,
    'progress after the restart',
  );
  recoveries.temporal_server = (Date.now() - t0) / 1000;
}
