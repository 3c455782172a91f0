// tempo-rl config check FILE [--json]
import type { Command } from 'commander';
import YAML from 'yaml';
import { describeFinding, configFileFindings } from '../config/files.js';
import { ConfigError, loadConfig, redact } from '../config/load.js';
import { tlsInUse, type TempoConfig } from '../config/schema.js';
import { visibleGpus } from '../supervise/gpus.js';
import { action, globalFlags, printJson } from './common.js';

/** Notes on stderr where the printed config would mislead: temporal.tls.enabled false while the
 *  connection uses TLS anyway (an API key or a client certificate turns it on). */
function notes(cfg: TempoConfig): string[] {
  const t = cfg.temporal;
  if (t.tls.enabled || !tlsInUse(t)) return [];
  const why = t.api_key ? 'temporal.api_key is set' : 'a client certificate is given (temporal.tls.client_cert_*)';
  return [`config check: note: temporal.tls.enabled is false, but the connection uses TLS: ${why}`];
}

export function register(program: Command): void {
  const config = program.command('config').description('configuration');
  config
    .command('check')
    .argument('[file]', 'YAML config file')
    .option('--json', 'print the resolved config as one JSON object')
    .description('validate a config and the files it names, and print it resolved, secrets redacted')
    .action(
      action(async (file: string | undefined, opts: { json?: boolean }, cmd: Command) => {
        const flags = globalFlags(cmd);
        const cfg = loadConfig({ file: file ?? flags.config, sets: flags.set ?? [] });
        const findings = await configFileFindings(cfg);
        for (const f of findings.filter((x) => x.severity === 'warning'))
          process.stderr.write(`config check: warning: ${describeFinding(f)}\n`);
        const errors = findings.filter((x) => x.severity === 'error');
        if (errors.length > 0)
          throw new ConfigError(
            `config error (files the config names):\n${errors.map((f) => `  ${describeFinding(f)}`).join('\n')}`,
          );
        for (const line of notes(cfg)) process.stderr.write(`${line}\n`);
        // a warning only: a config is often checked away from the machine it runs on
        const gpus = cfg.model.num_gpus > 0 ? visibleGpus() : null;
        if (gpus && gpus.count < cfg.model.num_gpus)
          process.stderr.write(
            `config check: warning: model.num_gpus is ${cfg.model.num_gpus}, but this machine shows ${gpus.count} (${gpus.seen}); train and engine start refuse it here\n`,
          );
        const shown = redact(cfg);
        if (opts.json) printJson(shown);
        else process.stdout.write(YAML.stringify(shown));
      }),
    );
}
