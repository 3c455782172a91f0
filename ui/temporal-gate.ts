// Every look-up the UI makes on the Temporal server goes through here, bounded by a short deadline:
// a server that is down answers UNAVAILABLE only after the client's retries (18–20 s), and a page
// must not wait for that. A look-up that gets no answer marks the server down: for the next few
// seconds the others do not ask (they answer from the step records and samples at once), then one
// asks again. The page reads the state (a header on every API answer, and /api/status) and shows
// a banner while the server is down.
import type { Client } from '@temporalio/client';

export const TEMPORAL_DEADLINE_MS = 1500;
export const TEMPORAL_RETRY_MS = 3000;

export interface TemporalState {
  /** up: the last look-up was answered; down: it was not (the pages answer from the records);
   *  none: there is no server to ask. */
  state: 'up' | 'down' | 'none';
  address: string | null;
  /** Why the last look-up got no answer (down only). */
  error: string | null;
  /** Since when the server has not answered (down only). */
  since: string | null;
}

class NoAnswer extends Error {}

/** gRPC UNAVAILABLE (14) or DEADLINE_EXCEEDED (4), as the client reports them (its ServiceError's
 *  cause carries the code), or the gate's own bound. */
export function isUnanswered(err: unknown): boolean {
  if (err instanceof NoAnswer) return true;
  const code = grpcCode(err);
  if (code === 14 || code === 4) return true;
  return /\b(UNAVAILABLE|DEADLINE_EXCEEDED|ECONNREFUSED)\b|Failed to connect|No connection established/.test(
    String((err as Error)?.message ?? ''),
  );
}

function grpcCode(err: unknown): unknown {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | null;
  return e?.code ?? e?.cause?.code;
}

const sentence = (err: unknown) =>
  String((err as Error)?.message ?? err)
    .split('\n')[0]!
    .slice(0, 300);

export class TemporalGate {
  private downSince: number | null = null;
  private error: string | null = null;
  private retryAt = 0;
  private probing = false;

  constructor(
    readonly client: Client | null,
    readonly opts: { address?: string | null; deadlineMs?: number; retryMs?: number } = {},
  ) {}

  state(): TemporalState {
    const address = this.opts.address ?? null;
    if (!this.client) return { state: 'none', address, error: null, since: null };
    if (this.downSince === null) return { state: 'up', address, error: null, since: null };
    return { state: 'down', address, error: this.error, since: new Date(this.downSince).toISOString() };
  }

  /**
   * `fn` with the client under the deadline: { value } when the server answered, null when there is
   * none to ask, it did not answer in time, or it is down and not due to be asked again yet. Other
   * errors (a workflow that does not exist) are thrown as they are. `timeoutIsDown: false` for a
   * query, which waits on the run's workers: its timeout says nothing of the server.
   */
  async ask<T>(
    fn: (client: Client) => Promise<T>,
    opts: { deadlineMs?: number; timeoutIsDown?: boolean } = {},
  ): Promise<{ value: T } | null> {
    const client = this.client;
    if (!client) return null;
    let probe = false;
    if (this.downSince !== null) {
      if (this.probing || Date.now() < this.retryAt) return null;
      this.probing = probe = true;
    }
    const ms = opts.deadlineMs ?? this.opts.deadlineMs ?? TEMPORAL_DEADLINE_MS;
    let timer: NodeJS.Timeout | undefined;
    // the deadline reaches the client's gRPC calls (and their retries); the race bounds the rest
    const bound = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new NoAnswer(`no answer in ${ms} ms`)), ms + 250);
    });
    try {
      const value = await Promise.race([client.withDeadline(Date.now() + ms, () => fn(client)), bound]);
      this.downSince = null;
      this.error = null;
      return { value };
    } catch (err) {
      if (!isUnanswered(err)) throw err;
      const timedOut = err instanceof NoAnswer || grpcCode(err) === 4;
      if (timedOut && opts.timeoutIsDown === false) return null;
      this.downSince ??= Date.now();
      this.error = sentence(err);
      this.retryAt = Date.now() + (this.opts.retryMs ?? TEMPORAL_RETRY_MS);
      return null;
    } finally {
      clearTimeout(timer);
      if (probe) this.probing = false;
    }
  }
}
