// The UI's HTTP server: the guard (ui/guard.ts), the JSON API under /api and the page's files, on
// one address (127.0.0.1 by default). Read-only: nothing it serves changes a run.
import { lookup } from 'node:dns/promises';
import { type AddressInfo, createServer, isIPv4, isIPv6 } from 'node:net';
import type { Server } from 'node:http';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { UnreadableFile } from '../base/bounded-file.js';
import { childLogger } from '../base/log.js';
import { apiRoutes } from './api.js';
import { UiError, type Served, type UiContext } from './context.js';
import { allowedAuthorities, authority, guard } from './guard.js';
import { staticAssets } from './static.js';

const log = childLogger('ui');

export interface UiServer {
  url: string;
  host: string;
  port: number;
  close(): Promise<void>;
}

const usage = (message: string): Error => Object.assign(new Error(message), { exitCode: 2 });

/** A host to listen on, as written: one address or name (the Host check needs the name a browser uses). */
export function checkHost(host: string): string {
  if (host === '')
    throw usage(
      '--host "": give the one address or name the browser will use (the server checks the Host header against it), e.g. 127.0.0.1',
    );
  if (!/^[A-Za-z0-9.:-]+$/.test(host)) throw usage(`--host ${JSON.stringify(host)}: not a host name or address`);
  return host;
}

/** An address in one spelling (IPv6 compressed: 0:0:0:0:0:0:0:0 is ::; an IPv4-mapped one, its IPv4). */
function canonicalAddress(address: string): string {
  if (!isIPv6(address)) return address;
  const canon = new URL(`http://[${address}]/`).hostname.slice(1, -1);
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(canon);
  if (!mapped) return canon;
  const [hi, lo] = [Number.parseInt(mapped[1]!, 16), Number.parseInt(mapped[2]!, 16)];
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

const isUnspecified = (a: string) => a === '0.0.0.0' || a === '::';
const isLoopback = (a: string) => a === '::1' || (isIPv4(a) && a.startsWith('127.'));

/**
 * The host the UI listens on, checked by the addresses it resolves to, not by how it is written
 * (0, ::0, 0:0:0:0:0:0:0:0 and 0.0.0.0 are all every interface): never every interface; a loopback
 * address, or another only with `allowRemote` (then `warn` says who can read the runs); and one this
 * machine can listen on at `port`, checked by listening once before anything is started.
 */
export async function resolveUiHost(
  host: string,
  port: number,
  opts: { allowRemote?: boolean; warn?: (line: string) => void } = {},
): Promise<{ host: string; loopback: boolean }> {
  checkHost(host);
  let addresses: string[];
  try {
    addresses = (await lookup(host, { all: true, verbatim: true })).map((a) => canonicalAddress(a.address));
  } catch (err) {
    throw usage(
      `--host ${JSON.stringify(host)}: no such host (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
  const any = addresses.find(isUnspecified);
  if (any)
    throw usage(
      `--host ${JSON.stringify(host)} is ${any}, every interface of this machine: give the one address or name the browser will use, e.g. 127.0.0.1`,
    );
  const remote = addresses.filter((a) => !isLoopback(a));
  if (remote.length > 0) {
    if (!opts.allowRemote)
      throw usage(
        `--host ${JSON.stringify(host)} (${remote.join(', ')}) is not a loopback address: whoever can reach it reads every run, unauthenticated; pass --allow-remote to serve it there anyway`,
      );
    opts.warn?.(
      `warning: tempo-rl ui serves every run of this state dir to whoever can reach ${host} (${remote.join(', ')}): it has no authentication`,
    );
  }
  await new Promise<void>((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'EADDRINUSE'
          ? usage(`--port ${port}: taken on ${host} by another process; choose another with --port`)
          : usage(`--host ${JSON.stringify(host)}: cannot listen there (${err.code ?? err.message})`),
      ),
    );
    probe.listen(port, host, () => probe.close(() => resolve()));
  });
  return { host, loopback: remote.length === 0 };
}

/** The status and message of an error a handler threw. */
function errorResponse(err: unknown): { status: 400 | 403 | 404 | 405 | 500; error: string } {
  if (err instanceof UiError) return { status: err.status, error: err.message };
  // a record of the state dir that cannot be read: the server's side, named
  if (err instanceof UnreadableFile) return { status: 500, error: err.message };
  const e = err as Error & { exitCode?: number };
  // exit code 2: a usage error (a bad run id from checkRunId)
  if (e?.exitCode === 2) return { status: 400, error: e.message };
  return { status: 500, error: e?.message ?? String(err) };
}

export function uiApp(
  ctx: UiContext,
  allowed: () => Set<string>,
  served: () => Served = () => ({ host: '127.0.0.1', remote: false }),
): Hono {
  const app = new Hono();
  app.use('*', async (c, next) => {
    const t0 = performance.now();
    await next();
    log.debug({ method: c.req.method, path: c.req.path, status: c.res.status, ms: performance.now() - t0 }, 'request');
  });
  app.use('*', guard(allowed));
  app.use('/api/*', async (c, next) => {
    await next();
    // the Temporal server's state after the look-ups of this answer: the page's banner follows it
    c.res.headers.set('X-Temporal-State', ctx.temporal.state().state);
  });
  app.route('/api', apiRoutes(ctx, served));
  app.get('*', staticAssets());
  app.onError((err, c) => {
    const { status, error } = errorResponse(err);
    if (status === 500) log.error({ path: c.req.path, err: error }, 'request failed');
    return c.json({ error }, status);
  });
  return app;
}

export async function startUi(
  ctx: UiContext,
  opts: { host: string; port: number; allowRemote?: boolean },
): Promise<UiServer> {
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535)
    throw Object.assign(new Error(`--port ${opts.port}: expected an integer from 0 (any free port) to 65535`), {
      exitCode: 2,
    });
  const { host, loopback } = await resolveUiHost(opts.host, opts.port, { allowRemote: opts.allowRemote });
  let allowed = new Set<string>();
  const app = uiApp(
    ctx,
    () => allowed,
    () => ({ host, remote: !loopback }),
  );
  const server = await new Promise<Server>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, hostname: host, port: opts.port }, () => resolve(s as Server)) as Server;
    s.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'EADDRINUSE'
          ? new Error(`port ${opts.port} on ${host} is taken by another process: choose another with --port`)
          : err,
      ),
    );
  });
  const port = (server.address() as AddressInfo).port;
  allowed = allowedAuthorities(host, port, loopback);
  const url = `http://${authority(host, port)}/`;
  log.info({ url }, 'ui listening');
  return {
    url,
    host,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
