// What keeps the UI local and inert: only GET and HEAD; a Host header that names this server (a page
// of another site that rebinds its DNS name to 127.0.0.1 sends its own name, and is refused); an
// Origin, when a browser sends one, of this server; no cross-site fetch (Sec-Fetch-Site); and on
// every response a Content-Security-Policy that runs only the server's own scripts, with no inline
// script or style, no frames and no connection elsewhere.
import type { MiddlewareHandler } from 'hono';

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS: Record<string, string> = {
  'Content-Security-Policy': CONTENT_SECURITY_POLICY,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
};

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/** host:port as a Host header spells it (an IPv6 address in brackets). */
export function authority(host: string, port: number): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** The Host values this server answers to: its own; on a loopback address (`loopback`: what the host
 *  resolved to, 127.1 included) also the loopback names (the same machine), never a name another site
 *  could point here. */
export function allowedAuthorities(host: string, port: number, loopback = LOOPBACK.has(host)): Set<string> {
  const names = loopback ? [...new Set([host, ...LOOPBACK])] : [host];
  return new Set(names.map((h) => authority(h, port).toLowerCase()));
}

function refusal(request: { method: string; host?: string; origin?: string; site?: string }, allowed: Set<string>) {
  if (request.method !== 'GET' && request.method !== 'HEAD')
    return { status: 405 as const, error: `method ${request.method}: the UI is read-only (GET only)` };
  const host = request.host?.toLowerCase();
  if (!host || !allowed.has(host))
    return {
      status: 403 as const,
      // the names this server answers to are not told: a page of another site learns nothing to send
      error: `Host ${JSON.stringify(request.host ?? '')} is not this server: refused`,
    };
  if (request.origin !== undefined && !allowed.has(request.origin.toLowerCase().replace(/^http:\/\//, '')))
    return { status: 403 as const, error: `Origin ${JSON.stringify(request.origin)} is not this server: refused` };
  if (request.site !== undefined && request.site !== 'same-origin' && request.site !== 'none')
    return { status: 403 as const, error: `a ${request.site} request: refused` };
  return null;
}

/** `allowed()` gives the Host values of the server (known once it listens). */
export function guard(allowed: () => Set<string>): MiddlewareHandler {
  return async (c, next) => {
    const refused = refusal(
      {
        method: c.req.method,
        host: c.req.header('host'),
        origin: c.req.header('origin'),
        site: c.req.header('sec-fetch-site'),
      },
      allowed(),
    );
    if (refused) c.res = c.json({ error: refused.error }, refused.status);
    else await next();
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) c.res.headers.set(k, v);
    if (!c.res.headers.has('Cache-Control')) c.res.headers.set('Cache-Control', 'no-store');
  };
}
