// tempo-rl worker rollout|trainer|environments (foreground) | stop|status [--json] (this stack's background workers)
import type { Command } from 'commander';
import { stopWorkers, workerStatuses } from '../supervise/stack.js';
import { action, configFrom, printJson } from './common.js';
import { checkTemporalAnswers } from '../client/run-client.js';

export function register(program: Command): void {
  const worker = program
    .command('worker')
    .description('the workers: run one in the foreground, or stop or list the background ones');
  worker
    .command('rollout')
    .description('the TypeScript worker: workflows and rollout activities (task queue temporal.task_queues.rollout)')
    .action(
      action(async (_opts: object, cmd: Command) => {
        const { runRolloutWorker } = await import('../rollout/worker.js');
        await runRolloutWorker(configFrom(cmd));
      }),
    );
  worker
    .command('trainer')
    .description('the Python trainer worker (task queue temporal.task_queues.trainer)')
    .action(
      action(async (_opts: object, cmd: Command) => {
        const cfg = configFrom(cmd);
        await checkTemporalAnswers(cfg);
        const { runTrainerWorker } = await import('../supervise/trainer-process.js');
        process.exitCode = await runTrainerWorker(cfg);
      }),
    );
  worker
    .command('environments')
    .description('the Python environment worker of python_env (task queue temporal.task_queues.environments)')
    .action(
      action(async (_opts: object, cmd: Command) => {
        const { runEnvironmentWorker } = await import('../supervise/environment-worker.js');
        process.exitCode = await runEnvironmentWorker(configFrom(cmd));
      }),
    );
  worker
    .command('stop')
    .description('stop the background workers this state directory started (train, demo)')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const stopped = await stopWorkers(configFrom(cmd));
        if (opts.json) printJson({ stopped });
        else
          console.log(
            stopped.length
              ? `stopped the ${stopped.join(' and ')} worker${stopped.length > 1 ? 's' : ''}`
              : 'no worker of ours was running',
          );
      }),
    );
  worker
    .command('status')
    .description("this state directory's background workers and the task queues they poll")
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const workers = workerStatuses(configFrom(cmd));
        if (opts.json) return printJson({ workers });
        for (const w of workers)
          console.log(
            `${w.kind}: ${w.running ? `running (${w.standby_pids.length || w.pids.length < 2 ? `pid ${w.pid}` : `pids ${w.pids.join(' ')}`}${w.standby_pids.length ? `, standby ${w.standby_pids.join(' ')}` : ''}, log ${w.log})` : 'not running'}, task queue ${w.task_queue}`,
          );
      }),
    );
}
