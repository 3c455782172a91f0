// tempo-rl train CONFIG [--run-id ID] [--detach] | status RUN [--json] | pause|resume|stop RUN
// A detached run's record of what its start started lets `stop` stop that too (client/detached-run.ts).
import type { Command } from 'commander';
import type { TempoConfig } from '../config/schema.js';
import { detachedStart, recordDetachedStart, stopDetachedStart } from '../client/detached-run.js';
import {
  connectToRuns,
  runHandle,
  runIsRunning,
  runProgress,
  startOrContinueRun,
  controlRun,
} from '../client/run-client.js';
import { StackProblem } from '../supervise/preflight.js';
import { describeStarted, ensureStack, stopStarted, stopStartedOnSignal } from '../supervise/stack.js';
import { watchStack } from '../supervise/watch.js';
import { connectClient } from '../supervise/temporal.js';
import { checkRunId } from '../stores/layout.js';
import { withWarmStart } from '../client/warm-start.js';
import { type Ack, type RunProgress, type RunResult, logprobDiffWarning } from '../protocol/training-run.js';
import { action, configFrom, printJson } from './common.js';

function bar(done: number, total: number, width = 24): string {
  const filled = total ? Math.round((done / total) * width) : 0;
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

function progressLine(p: RunProgress): string {
  const reward = p.metrics['rollout/raw_reward'];
  return (
    `step ${p.step}/${p.steps_total} ${bar(p.step, p.steps_total)}  ${p.phase}  episodes ${p.episodes_done}/${p.episodes_total} ${bar(p.episodes_done, p.episodes_total, 16)}` +
    (reward !== undefined ? `  reward ${reward.toFixed(3)}` : '')
  );
}

const secs = (v: number | undefined) => (v === undefined ? '–' : `${v.toFixed(1)} s`);

/** The trainer's GPU memory in a step (its peak, and the allocator's retries: memory pressure). */
function trainerMemory(m: Record<string, number>): string {
  const peak = m['perf/train_peak_allocated_gib'];
  if (peak === undefined) return '';
  const retries = m['perf/train_alloc_retries'] ?? 0;
  return ` (GPU peak ${peak.toFixed(1)} GiB${retries ? `, ${retries} allocator retries` : ''})`;
}

/** A finished step's time split and throughput, from its metrics (one line). */
export function stepSummary(step: number, m: Record<string, number>): string {
  const parts = [`rollout ${secs(m['perf/rollout_time'])}`, `train ${secs(m['perf/train_time'])}${trainerMemory(m)}`];
  if (m['perf/checkpoint_snapshot_seconds'] !== undefined)
    parts.push(`checkpoint ${secs(m['perf/checkpoint_snapshot_seconds'])} to host memory, written in the background`);
  else if (m['perf/checkpoint_seconds'] !== undefined) parts.push(`checkpoint ${secs(m['perf/checkpoint_seconds'])}`);
  let sync = `weight sync ${secs(m['perf/weight_sync_time'])}`;
  if (m['sync/transfer_bytes'])
    sync += ` (${(m['sync/transfer_bytes'] / 1e9).toFixed(2)} GB in ${secs(m['sync/transfer_seconds'])}, ${m['sync/seconds_per_gb']?.toFixed(3)} s/GB pause to resume)`;
  parts.push(sync);
  if (m['perf/engine_sleep_seconds'] !== undefined || m['sync/wake_seconds'] !== undefined)
    parts.push(`engines sleep ${secs(m['perf/engine_sleep_seconds'])} / wake ${secs(m['sync/wake_seconds'])}`);
  const tps = (v: number | undefined) => (v === undefined ? '–' : `${Math.round(v)} tokens/s`);
  const line = `step ${step} took ${secs(m['perf/step_time'])}: ${parts.join(', ')}; rollout ${tps(m['perf/rollout_tokens_per_second'])}, train ${tps(m['perf/train_tokens_per_second'])}`;
  const drift = logprobDiffWarning(step, m);
  return drift ? `${line}\n${drift}` : line;
}

/** Follows a run until it ends: a redrawn line on a terminal, plain log lines otherwise; a line with
 *  each finished step's time split. */
export async function followRun(cfg: TempoConfig, runId: string): Promise<RunResult> {
  const client = await connectClient(cfg);
  const handle = runHandle(client, runId);
  const tty = process.stderr.isTTY;
  let last = '';
  let summarised = -1;
  const timer = setInterval(
    async () => {
      try {
        const p = await runProgress(client, runId);
        if (p.step > 0 && p.step - 1 > summarised && p.metrics['perf/step_time'] !== undefined) {
          summarised = p.step - 1;
          process.stderr.write(`${tty ? '\r\x1b[K' : ''}${stepSummary(summarised, p.metrics)}\n`);
          last = '';
        }
        const line = progressLine(p);
        if (line === last) return;
        last = line;
        process.stderr.write(tty ? `\r\x1b[K${line}` : `${line}\n`);
      } catch {
        /* the server may be restarting; try again on the next tick */
      }
    },
    tty ? 500 : 5000,
  );
  // A run is durable, but a command following it must not wait forever on a dead worker or a silent
  // engine (supervise/watch.ts): it names the problem and exits non-zero; the run goes on once fixed.
  const watch = watchStack(cfg, { warn: (line) => process.stderr.write(`${tty ? '\r\x1b[K' : ''}${line}\n`) });
  try {
    return (await Promise.race([handle.result(), watch.failed])) as RunResult;
  } catch (err) {
    if (!(err instanceof StackProblem)) throw err;
    throw new StackProblem(
      `${err.message}\nrun ${runId} stays in Temporal as it is: once this is fixed, \`tempo-rl train CONFIG --run-id ${runId}\` continues it (\`tempo-rl stop ${runId}\` stops it)`,
    );
  } finally {
    watch.stop();
    clearInterval(timer);
    if (tty) process.stderr.write('\n');
  }
}

export function register(program: Command): void {
  program
    .command('train')
    .argument('<config>', 'YAML config file')
    .option('--run-id <id>', 'run id (default: a new one); an existing id continues where it stopped')
    .option('--detach', 'start the run and return; workers keep running in the background')
    .option('--json', 'print the final result as one JSON object')
    .description('start (or continue) a GRPO training run; starts the server, engines and workers that are not running')
    .action(
      action(async (file: string, opts: { runId?: string; detach?: boolean; json?: boolean }, cmd: Command) => {
        const runId = checkRunId(opts.runId ?? `run-${new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14)}`);
        const cfg = configFrom(cmd, file);
        const started = await ensureStack(cfg);
        const disarmSignalStop = stopStartedOnSignal(cfg, started);
        let detached = false;
        try {
          const client = await connectClient(cfg);
          const s = await startOrContinueRun(
            client,
            (await withWarmStart(client, cfg, (id) => followRun(cfg, id))).cfg,
            runId,
          );
          process.stderr.write(
            s.alreadyRunning
              ? `run ${runId} is already running; following it\n`
              : s.resumedFromStep !== null
                ? `run ${runId} continues at step ${s.resumedFromStep}\n`
                : `run ${runId} started\n`,
          );
          if (opts.detach) {
            recordDetachedStart(cfg, runId, started);
            detached = true;
            process.stderr.write(
              `\`tempo-rl stop ${runId}\` stops it and, once it has ended, what this command started (${describeStarted(started).join(', ') || 'nothing'})\n`,
            );
            if (opts.json) printJson({ run_id: runId, detached: true, started: describeStarted(started) });
            return;
          }
          const result = await followRun(cfg, runId);
          if (opts.json) printJson(result);
          else
            process.stdout.write(
              `run ${runId} ${result.status} after ${result.steps_done} steps (weight version ${result.weight_version})${result.reason ? `: ${result.reason}` : ''}\n`,
            );
        } finally {
          disarmSignalStop();
          if (!detached) await stopStarted(cfg, started);
        }
      }),
    );
  program
    .command('status')
    .argument('<run>', 'run id')
    .option('--json', 'one JSON object on stdout')
    .description('step, status and last metrics of a run')
    .action(
      action(async (runId: string, opts: { json?: boolean }, cmd: Command) => {
        checkRunId(runId);
        const cfg = configFrom(cmd);
        const p = await runProgress(await connectToRuns(cfg), runId);
        if (opts.json)
          return printJson({
            run_id: runId,
            status: p.status,
            step: p.step,
            steps_total: p.steps_total,
            metrics: p.metrics,
          });
        process.stdout.write(`${runId}: ${p.status}\n${progressLine(p)}\n`);
        const drift = p.step > 0 ? logprobDiffWarning(p.step - 1, p.metrics) : null;
        if (drift) process.stdout.write(`${drift}\n`);
        for (const [k, v] of Object.entries(p.metrics)) process.stdout.write(`  ${k} = ${v}\n`);
      }),
    );
  program
    .command('stop')
    .argument('<run>', 'run id')
    .option('--json', 'one JSON object on stdout')
    .description(
      'stop a run after the current step; for a run started with train --detach, then stop what that start started',
    )
    .action(
      action(async (runId: string, opts: { json?: boolean }, cmd: Command) => {
        checkRunId(runId);
        const cfg = configFrom(cmd);
        const client = await connectToRuns(cfg);
        const detached = detachedStart(cfg, runId) !== null;
        // A detached run that has ended already needs no stop: only what its start started does.
        const ack = detached && !(await runIsRunning(client, runId)) ? null : await controlRun(client, runId, 'stop');
        const ackLine = (a: Ack) => `${a.accepted ? 'ok' : 'refused'}: ${a.message} (status ${a.status})\n`;
        if (ack && !ack.accepted) {
          if (opts.json) printJson(ack);
          else process.stdout.write(ackLine(ack));
          process.exitCode = 1;
          return;
        }
        if (ack && !opts.json) process.stdout.write(ackLine(ack));
        if (detached && !opts.json)
          process.stderr.write(
            `waiting for run ${runId} to end, then stopping what \`train --detach\` started for it\n`,
          );
        const stack = detached ? await stopDetachedStart(client, cfg, runId) : null;
        if (opts.json)
          return printJson({
            ...(ack ?? { accepted: true, message: 'the run had already ended' }),
            ...(stack ? { detached: stack } : {}),
          });
        if (stack?.kept.length)
          process.stdout.write(
            `kept running for runs ${stack.kept_for.join(', ')} of this stack: ${stack.kept.join(', ')} (\`tempo-rl stop ${stack.kept_for[0]}\` stops them after it)\n`,
          );
        else if (stack) process.stdout.write(`stopped: ${stack.stopped.join(', ') || 'nothing (already stopped)'}\n`);
      }),
    );
  for (const what of ['pause', 'resume'] as const) {
    const c = program.command(what).argument('<run>', 'run id').option('--json', 'one JSON object on stdout');
    if (what === 'pause') c.option('--now', 'cancel in-flight episodes at once (the step is redone on resume)');
    c.description(what === 'pause' ? 'pause a run after the current step (or --now)' : 'resume a paused run').action(
      action(async (runId: string, opts: { json?: boolean; now?: boolean }, cmd: Command) => {
        checkRunId(runId);
        const cfg = configFrom(cmd);
        const ack = await controlRun(
          await connectToRuns(cfg),
          runId,
          what === 'pause' && opts.now ? 'pause-now' : what,
        );
        if (opts.json) printJson(ack);
        else process.stdout.write(`${ack.accepted ? 'ok' : 'refused'}: ${ack.message} (status ${ack.status})\n`);
        if (!ack.accepted) process.exitCode = 1;
      }),
    );
  }
}
