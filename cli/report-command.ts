// tempo-rl report RUN [--out FILE] [--force]
import type { Command } from 'commander';
import { checkOutputFile } from '../base/out-path.js';
import { checkRunId } from '../stores/layout.js';
import { REPORT_OUTPUT, writeReport } from '../lib/report.js';
import { action, configFrom } from './common.js';

export function register(program: Command): void {
  program
    .command('report')
    .argument('<run>', 'run id')
    .option('--out <file>', 'where to write the HTML page (default: <state>/runs/<run>/report.html)')
    .option('--force', 'overwrite the --out file if it exists')
    .description("an HTML page with plots of the run's metrics")
    .action(
      action(async (runId: string, opts: { out?: string; force?: boolean }, cmd: Command) => {
        checkRunId(runId);
        const out =
          opts.out !== undefined ? checkOutputFile(opts.out, { force: opts.force, own: REPORT_OUTPUT }) : undefined;
        process.stdout.write(`${await writeReport(configFrom(cmd), runId, out)}\n`);
      }),
    );
}
