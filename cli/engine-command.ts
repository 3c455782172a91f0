// tempo-rl engine start|stop|status [--json]
import type { Command } from 'commander';
import { type EngineStatus, engineStatuses, startEngines, stopEngines } from '../supervise/engines.js';
import { checkGpus } from '../supervise/gpus.js';
import { action, configFrom, printJson } from './common.js';

function describe(s: EngineStatus): string {
  const state = s.healthy ? `healthy, vLLM ${s.version ?? '?'}` : 'not running';
  const missing = s.missing_routes.length ? `; missing routes: ${s.missing_routes.join(', ')}` : '';
  const who = s.external ? 'external' : `pid ${s.pid ?? '-'}`;
  return `${s.url}  ${state} (${who})${missing}`;
}

export function register(program: Command): void {
  const engine = program.command('engine').description('the embedded vLLM engine(s)');
  engine
    .command('start')
    .description('start engines.count engines (or check the external engines.urls) and wait until healthy')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const cfg = configFrom(cmd);
        checkGpus(cfg);
        const { started, statuses } = await startEngines(cfg);
        if (opts.json) return printJson({ started, engines: statuses });
        for (const s of statuses) console.log(describe(s));
        if (started === 0) console.log('nothing started');
      }),
    );
  engine
    .command('stop')
    .description('stop the engines this state directory started')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const stopped = await stopEngines(configFrom(cmd));
        if (opts.json) printJson({ stopped });
        else console.log(stopped ? `stopped ${stopped} engine(s)` : 'no engine of ours was running');
      }),
    );
  engine
    .command('status')
    .description('health, version, missing routes and metrics of each engine')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const statuses = await engineStatuses(configFrom(cmd));
        if (opts.json)
          return printJson({ healthy: statuses.length > 0 && statuses.every((s) => s.healthy), engines: statuses });
        if (statuses.length === 0) console.log('no engines');
        for (const s of statuses) console.log(describe(s));
      }),
    );
}
