// tempo-rl config check FILE [--json]
import type { Command } from 'commander';
import YAML from 'yaml';
import { loadConfig, redact } from '../config/load.js';
import { action, globalFlags, printJson } from './common.js';

export function register(program: Command): void {
  const config = program.command('config').description('configuration');
  config
    .command('check')
    .argument('[file]', 'YAML config file')
    .option('--json', 'print the resolved config as one JSON object')
    .description('validate a config and print it resolved, secrets redacted')
    .action(
      action(async (file: string | undefined, opts: { json?: boolean }, cmd: Command) => {
        const flags = globalFlags(cmd);
        const cfg = redact(loadConfig({ file: file ?? flags.config, sets: flags.set ?? [] }));
        if (opts.json) printJson(cfg);
        else process.stdout.write(YAML.stringify(cfg));
      }),
    );
}
