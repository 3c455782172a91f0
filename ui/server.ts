// The UI's HTTP server: the guard (ui/guard.ts), the JSON API under /api and the page's files, on
// one address (127.0.0.1 by default). Read-only: nothing it serves changes a run.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { UnreadableFile } from '../lib/bounded-file.js';
import { childLogger } from '../lib/log.js';
import { apiRoutes } from './api.js';
import { UiError, type UiContext } from './context.js';
import { allowedAuthorities, authority, guard } from './guard.js';
import { staticAssets } from './static.js';

const log = childLogger('ui');

export interface UiServer {
  url: string;
  host: string;
  port: number;
  close(): Promise<void>;
}

/** A host to listen on: one address or name, since the Host check needs the name a browser uses. */
export function checkHost(host: string): string {
  if (host === '' || host === '0.0.0.0' || host === '::' || host === '[::]')
    throw Object.assign(
      new Error(
        `--host ${JSON.stringify(host)}: give the one address or name the browser will use (the server checks the Host header against it), e.g. 127.0.0.1`,
      ),
      { exitCode: 2 },
    );
  if (!/^[A-Za-z0-9.:-]+$/.test(host))
    throw Object.assign(new Error(`--host ${JSON.stringify(host)}: not a host name or address`), { exitCode: 2 });
  return host;
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

export function uiApp(ctx: UiContext, allowed: () => Set<string>): Hono {
  const app = new Hono();
  app.use('*', async (c, next) => {
    const t0 = performance.now();
    await next();
    log.debug({ method: c.req.method, path: c.req.path, status: c.res.status, ms: performance.now() - t0 }, 'request');
  });
  app.use('*', guard(allowed));
  app.route('/api', apiRoutes(ctx));
  app.get('*', staticAssets());
  app.onError((err, c) => {
    const { status, error } = errorResponse(err);
    if (status === 500) log.error({ path: c.req.path, err: error }, 'request failed');
    return c.json({ error }, status);
  });
  return app;
}

export async function startUi(ctx: UiContext, opts: { host: string; port: number }): Promise<UiServer> {
  const host = checkHost(opts.host);
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535)
    throw Object.assign(new Error(`--port ${opts.port}: expected an integer from 0 (any free port) to 65535`), {
      exitCode: 2,
    });
  let allowed = new Set<string>();
  const app = uiApp(ctx, () => allowed);
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
  allowed = allowedAuthorities(host, port);
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
