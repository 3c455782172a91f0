// Typed failures of engine calls. Every error names the engine and the route, so a log line or a
// failed activity says which server misbehaved and where.

export type EngineErrorKind = 'http' | 'timeout' | 'unreachable' | 'malformed' | 'capability';

export class EngineError extends Error {
  constructor(
    readonly kind: EngineErrorKind,
    readonly engine: string,
    readonly route: string,
    detail: string,
  ) {
    super(`engine ${engine} ${route}: ${detail}`);
    this.name = 'EngineError';
  }
}

/** A non-2xx answer. `body` is the server's text, cut short. */
export class EngineHttpError extends EngineError {
  constructor(
    engine: string,
    route: string,
    readonly status: number,
    readonly body: string,
  ) {
    super('http', engine, route, `HTTP ${status}: ${body.slice(0, 500)}`);
    this.name = 'EngineHttpError';
  }
}

export class EngineTimeoutError extends EngineError {
  constructor(engine: string, route: string, timeoutMs: number) {
    super('timeout', engine, route, `no answer within ${timeoutMs} ms`);
    this.name = 'EngineTimeoutError';
  }
}

/** The request never reached the engine (connection refused/reset, DNS): always safe to send elsewhere. */
export class EngineUnreachableError extends EngineError {
  constructor(
    engine: string,
    route: string,
    readonly code: string,
  ) {
    super('unreachable', engine, route, `unreachable (${code})`);
    this.name = 'EngineUnreachableError';
  }
}

/** A 2xx answer whose body does not have the expected shape. */
export class EngineMalformedResponseError extends EngineError {
  constructor(engine: string, route: string, issues: string) {
    super('malformed', engine, route, `malformed response: ${issues}`);
    this.name = 'EngineMalformedResponseError';
  }
}

/** A route tempo-rl needs is not served; the message says which flag or variable enables it. */
export class EngineCapabilityError extends EngineError {
  constructor(
    engine: string,
    readonly missing: Array<{ route: string; enable: string }>,
  ) {
    super(
      'capability',
      engine,
      missing.map((m) => m.route).join(', '),
      `missing routes: ${missing.map((m) => `${m.route} (enable with ${m.enable})`).join('; ')}`,
    );
    this.name = 'EngineCapabilityError';
  }
}

/** Whether the engine is gone (as opposed to answering badly): the pool ejects it. */
export function engineIsDown(err: unknown): boolean {
  return err instanceof EngineUnreachableError;
}

/** Errors after which repeating an idempotent call may succeed. */
export function isTransient(err: unknown): boolean {
  if (err instanceof EngineUnreachableError || err instanceof EngineTimeoutError) return true;
  return err instanceof EngineHttpError && (err.status >= 500 || err.status === 429);
}
