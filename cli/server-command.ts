// tempo-rl server start|stop|status [--json]
import type { Command } from 'commander';
import { serverStatus, startServer, stopServer } from '../supervise/server.js';
import { action, configFrom, printJson } from './common.js';

export function register(program: Command): void {
  const server = program.command('server').description('the embedded Temporal server');
  server
    .command('start')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const { started, status } = await startServer(configFrom(cmd), { keep: true });
        if (opts.json) return printJson({ started, ...status });
        if (status.external) console.log(`using the external server at ${status.address}; nothing started`);
        else if (!started) console.log(`already running at ${status.address} (UI ${status.ui}); nothing to do`);
        else console.log(`Temporal server at ${status.address}\nUI: ${status.ui}\ndb: ${status.db}`);
      }),
    );
  server
    .command('stop')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const stopped = await stopServer(configFrom(cmd));
        if (opts.json) printJson({ stopped });
        else console.log(stopped ? 'stopped' : 'no server of ours was running');
      }),
    );
  server
    .command('status')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { json?: boolean }, cmd: Command) => {
        const s = await serverStatus(configFrom(cmd));
        if (opts.json) printJson({ running: s.running, address: s.address, ui: s.ui, db: s.db });
        else console.log(`${s.running ? 'running' : 'not running'} at ${s.address}${s.ui ? ` (UI ${s.ui})` : ''}`);
      }),
    );
}
