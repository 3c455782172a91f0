// tempo-rl ui [--port N] [--host H]: a local, read-only web page of the runs, their steps, GRPO groups
// and episodes (ui/). Runs until Ctrl-C; the embedded Temporal server is started for the look-ups if
// it is down, and on exit stopped again only if it is still the one it started and nothing else uses
// it (supervise/server.ts stopServerIfUnused).
import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { closeBlobStore, openConfiguredBlobStore } from '../lib/blob-store-config.js';
import { childLogger } from '../base/log.js';
import { modelPath } from '../config/run-plan.js';
import { lazyClient, temporalAddress } from '../supervise/temporal.js';
import type { TempoConfig } from '../config/schema.js';
import { serverStatus, startServer, stopServerIfUnused } from '../supervise/server.js';
import { resolveUiHost, startUi } from '../ui/server.js';
import { TemporalGate } from '../ui/temporal-gate.js';
import { tokenDecoders } from '../ui/tokens.js';
import { action, configFrom } from './common.js';

const log = childLogger('ui');
export const DEFAULT_UI_PORT = 8288;

function parsePort(value: string): number {
  // digits only: Number() would read '' as 0 and '1e3' as 1000
  const port = /^\d{1,5}$/.test(value) ? Number(value) : Number.NaN;
  if (!(port >= 0 && port <= 65535))
    throw Object.assign(
      new Error(`--port ${JSON.stringify(value)}: expected an integer from 0 (any free port) to 65535`),
      {
        exitCode: 2,
      },
    );
  return port;
}

export interface Lookups {
  client: Client;
  /** The pid of the embedded server started for the look-ups (null: none started). */
  startedPid: number | null;
  ui: string | null;
}

/** The embedded server if it is down (the histories live in its SQLite file), and a client that
 *  connects on its first look-up: a server that is down now, or later, leaves the pages on the step
 *  records (ui/temporal-gate.ts) until it answers again. */
export async function temporalForLookups(cfg: TempoConfig): Promise<Lookups> {
  let startedPid: number | null = null;
  try {
    if (!cfg.temporal.address && !(await serverStatus(cfg)).running) {
      const { started, status } = await startServer(cfg);
      if (started) startedPid = status.pid;
    }
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'cannot start the Temporal server: the pages show the step records');
  }
  const ui = cfg.temporal.address ? null : (await serverStatus(cfg)).ui || null;
  return { client: lazyClient(cfg), startedPid, ui };
}

/** Closes the client; stops the server it started only where no one else uses it. */
export async function releaseLookups(cfg: TempoConfig, lookups: Lookups): Promise<{ stopped: boolean; why: string }> {
  await lookups.client.connection.close().catch(() => undefined);
  if (lookups.startedPid === null) return { stopped: false, why: 'it started no server' };
  const result = await stopServerIfUnused(cfg, lookups.startedPid);
  log.info(result, result.stopped ? 'Temporal server stopped' : 'Temporal server left running');
  return result;
}

/** Resolves on the first SIGINT or SIGTERM. */
function interrupted(): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      process.off('SIGINT', done);
      process.off('SIGTERM', done);
      resolve();
    };
    process.on('SIGINT', done);
    process.on('SIGTERM', done);
  });
}

export function register(program: Command): void {
  program
    .command('ui')
    .description('a local, read-only web page of the runs, steps, GRPO groups and episodes')
    .option('--port <n>', `port to listen on (0: any free port)`, String(DEFAULT_UI_PORT))
    .option(
      '--host <h>',
      'address to listen on (the browser must use this name); loopback unless --allow-remote',
      '127.0.0.1',
    )
    .option(
      '--allow-remote',
      'listen on a --host that is not loopback (no authentication: whoever reaches it reads every run)',
    )
    .action(
      action(async (opts: { port: string; host: string; allowRemote?: boolean }, cmd: Command) => {
        const port = parsePort(opts.port);
        const cfg = configFrom(cmd);
        // before anything is started: the Temporal server below, the blob store
        const { host } = await resolveUiHost(opts.host, port, {
          allowRemote: opts.allowRemote,
          warn: (line) => process.stderr.write(`${line}\n`),
        });
        const temporal = await temporalForLookups(cfg);
        const store = await openConfiguredBlobStore(cfg);
        const decoders = tokenDecoders();
        try {
          const ui = await startUi(
            {
              cfg,
              temporal: new TemporalGate(temporal.client, { address: temporalAddress(cfg) }),
              store,
              decoder: (dir) => decoders(dir ?? modelPath(cfg)),
              temporalUi: temporal.ui,
            },
            { host, port, allowRemote: opts.allowRemote },
          );
          process.stdout.write(`tempo-rl ui: ${ui.url}  (Ctrl-C stops it)\n`);
          await interrupted();
          await ui.close();
        } finally {
          closeBlobStore(store);
          await releaseLookups(cfg, temporal);
        }
      }),
    );
}
