// Bounded retries with exponential backoff, for calls that are safe to repeat.

export interface RetryPolicy {
  /** Total attempts, the first included. */
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 4, baseDelayMs: 200, maxDelayMs: 5_000 };

export function backoffMs(policy: RetryPolicy, failedAttempts: number): number {
  return Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (failedAttempts - 1));
}

/**
 * Runs `fn(attempt)` until it succeeds, `shouldRetry` says no, or attempts run out; the last error is
 * thrown. `onRetry` runs before each wait (the pool ejects a dead engine there).
 */
export async function withRetries<T>(
  fn: (attempt: number) => Promise<T>,
  opts: {
    policy?: RetryPolicy;
    shouldRetry: (err: unknown) => boolean;
    onRetry?: (err: unknown, attempt: number) => void;
    sleep?: (ms: number) => Promise<void>;
  },
): Promise<T> {
  const policy = opts.policy ?? DEFAULT_RETRY;
  const sleep = opts.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (attempt >= policy.attempts || !opts.shouldRetry(err)) throw err;
      opts.onRetry?.(err, attempt);
      await sleep(backoffMs(policy, attempt));
    }
  }
}
