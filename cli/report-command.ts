// tempo-rl report RUN [--out FILE]
import type { Command } from 'commander';
import { writeReport } from '../lib/report.js';
import { action, configFrom } from './common.js';

export function register(program: Command): void {
  program
    .command('report')
    .argument('<run>', 'run id')
    .option('--out <file>', 'where to write the HTML page (default: <state>/runs/<run>/report.html)')
    .description('an HTML page with plots of the run\'s metrics')
    .action(
      action(async (runId: string, opts: { out?: string }, cmd: Command) => {
        process.stdout.write(`${await writeReport(configFrom(cmd), runId, opts.out)}\n`);
      }),
    );
}
