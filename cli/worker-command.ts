// tempo-rl worker rollout|trainer
import type { Command } from 'commander';
import { action, configFrom } from './common.js';

export function register(program: Command): void {
  const worker = program.command('worker').description('run a worker in the foreground');
  worker
    .command('rollout')
    .description('the TypeScript worker: workflows and rollout activities (task queue "rollout")')
    .action(
      action(async (_opts: object, cmd: Command) => {
        const { runRolloutWorker } = await import('../workers/rollout-worker.js');
        await runRolloutWorker(configFrom(cmd));
      }),
    );
  worker
    .command('trainer')
    .description('the Python trainer worker (task queue "trainer")')
    .action(
      action(async (_opts: object, cmd: Command) => {
        const { runTrainerWorker } = await import('../workers/trainer-process.js');
        process.exitCode = await runTrainerWorker(configFrom(cmd));
      }),
    );
}
