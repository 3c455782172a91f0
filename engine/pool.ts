// A pool of engines: routing (round_robin; consistent_hash on the episode id so every turn of an
// episode reaches the same engine and its prefix cache; cache_aware on the request's token prefix and
// the engines' in-flight load), ejection of dead engines and their readmission, bounded retries of
// calls that are safe to repeat, and calls sent to every engine (metrics, prefix-cache resets). Weight
// syncs are the trainer's (workers/trainer/weights/sync.py): it pauses, loads, labels and resumes.
import type { Logger } from 'pino';
import { childLogger } from '../base/log.js';
import { CacheAwareRouter, type CacheAwareOptions, featureExtras } from './cache-aware.js';
import { VllmClient } from './client.js';
import { type EngineError, engineIsDown, isTransient } from './errors.js';
import { HashRing } from './hash-ring.js';
import { DEFAULT_RETRY, type RetryPolicy, withRetries } from './retry.js';
import type {
  ChatMessage,
  EngineMetrics,
  GenerateInput,
  GenerateResult,
  RenderChatInput,
  RenderedPrompt,
  ToolSpec,
} from './types.js';

export type RoutingPolicy = 'round_robin' | 'consistent_hash' | 'cache_aware';

/** What the pool needs of an engine (VllmClient; fakes in unit tests). */
export type PoolEngine = Pick<
  VllmClient,
  | 'url'
  | 'isHealthy'
  | 'generate'
  | 'renderChat'
  | 'tokenizeChat'
  | 'tokenize'
  | 'detokenize'
  | 'resetPrefixCache'
  | 'metrics'
>;

export interface EnginePoolOptions {
  policy: RoutingPolicy;
  retry?: RetryPolicy;
  virtualNodes?: number;
  cacheAware?: CacheAwareOptions;
  /** Health checks run every this many ms once start() is called. */
  healthIntervalMs?: number;
  /** Consecutive failed health checks that eject an engine while none of its requests run (a refused
   *  connection ejects at once). */
  ejectAfterFailures?: number;
  log?: Logger;
}

export interface FanOutResult<T> {
  url: string;
  ok: boolean;
  /** The engine was ejected (down) and was not asked. */
  skipped: boolean;
  value?: T;
  error?: string;
  seconds: number;
}

export class NoHealthyEngineError extends Error {
  constructor(urls: string[]) {
    super(`no healthy engine among ${urls.join(', ')}`);
    this.name = 'NoHealthyEngineError';
  }
}

export class PoolControlError extends Error {
  constructor(
    readonly operation: string,
    readonly results: FanOutResult<unknown>[],
  ) {
    super(
      `${operation} failed on ${results
        .filter((r) => !r.ok && !r.skipped)
        .map((r) => `${r.url} (${r.error})`)
        .join(', ')}`,
    );
    this.name = 'PoolControlError';
  }
}

export class EnginePool {
  private readonly byUrl: Map<string, PoolEngine>;
  private readonly ring: HashRing;
  private readonly prefixes: CacheAwareRouter | null;
  /** Requests of this pool now running on each engine (the load cache_aware balances). */
  private readonly inFlight = new Map<string, number>();
  private readonly down = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly log: Logger;
  private rr = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    readonly engines: PoolEngine[],
    readonly opts: EnginePoolOptions,
  ) {
    if (engines.length === 0) throw new Error('an engine pool needs at least one engine');
    this.byUrl = new Map(engines.map((e) => [e.url, e]));
    this.ring = new HashRing(
      engines.map((e) => e.url),
      opts.virtualNodes ?? 128,
    );
    this.prefixes = opts.policy === 'cache_aware' ? new CacheAwareRouter(opts.cacheAware) : null;
    this.log = opts.log ?? childLogger('engine-pool');
  }

  static fromUrls(urls: string[], opts: EnginePoolOptions & { timeoutMs?: number }): EnginePool {
    return new EnginePool(
      urls.map((url) => new VllmClient({ url, timeoutMs: opts.timeoutMs })),
      opts,
    );
  }

  get urls(): string[] {
    return this.engines.map((e) => e.url);
  }

  healthyUrls(): string[] {
    return this.urls.filter((u) => !this.down.has(u));
  }

  isDown(url: string): boolean {
    return this.down.has(url);
  }

  load(url: string): number {
    return this.inFlight.get(url) ?? 0;
  }

  /**
   * The engine for `key` (an episode id) under the pool's policy, among the healthy ones. `avoid`
   * (engines that failed this call before) is honoured while another healthy engine remains.
   * cache_aware routes by `prompt` (without one: the least-loaded engine).
   */
  pick(key?: string, avoid: string[] = [], prompt?: Pick<GenerateInput, 'tokenIds' | 'features'>): PoolEngine {
    let healthy = this.healthyUrls();
    if (healthy.length === 0) throw new NoHealthyEngineError(this.urls);
    const preferred = healthy.filter((u) => !avoid.includes(u));
    if (preferred.length > 0) healthy = preferred;
    if (this.prefixes) {
      return this.byUrl.get(
        this.prefixes.choose(prompt?.tokenIds ?? [], healthy, (u) => this.load(u), featureExtras(prompt?.features)),
      )!;
    }
    if (this.opts.policy === 'consistent_hash' && key !== undefined) {
      return this.byUrl.get(this.ring.lookup(key, (u) => healthy.includes(u))!)!;
    }
    return this.byUrl.get(healthy[this.rr++ % healthy.length]!)!;
  }

  eject(url: string, reason: string): void {
    if (this.down.has(url)) return;
    this.down.add(url);
    // It may come back restarted, with an empty cache.
    this.prefixes?.forget(url);
    this.log.warn({ engine: url, reason }, 'engine ejected');
  }

  /** Brings an engine back. One that missed a weight sync answers with an older weight version, which
   *  activities/generate.ts refuses, until the trainer's next sync (sent to every engine) mends it. */
  async readmit(url: string): Promise<void> {
    if (!this.down.has(url)) return;
    this.down.delete(url);
    this.failures.delete(url);
    this.log.info({ engine: url }, 'engine readmitted');
  }

  /** One health pass over every engine. */
  async checkHealth(): Promise<void> {
    await Promise.all(
      this.engines.map(async (e) => {
        if (await e.isHealthy()) {
          this.failures.set(e.url, 0);
          if (this.down.has(e.url))
            await this.readmit(e.url).catch((err) =>
              this.log.warn({ engine: e.url, err: String(err) }, 'readmission failed'),
            );
          return;
        }
        // A busy engine can be slow to answer its health route (vLLM's API server under 256 long
        // completions: measured past 5 s on an H100) while it serves. Its running requests tell: a dead
        // one fails them (a refused or reset connection ejects at once), a hung one times them out.
        // Counting the slow probe would eject a pool's only engine and fail every episode.
        const busy = this.load(e.url);
        if (busy > 0) {
          this.log.debug({ engine: e.url, in_flight: busy }, 'health check failed while serving: not counted');
          return;
        }
        const n = (this.failures.get(e.url) ?? 0) + 1;
        this.failures.set(e.url, n);
        if (n >= (this.opts.ejectAfterFailures ?? 2)) this.eject(e.url, `${n} failed health checks`);
      }),
    );
  }

  start(): this {
    if (this.timer) return this;
    const interval = this.opts.healthIntervalMs ?? 5_000;
    this.timer = setInterval(() => void this.checkHealth().catch(() => undefined), interval);
    this.timer.unref();
    return this;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * Runs `fn` on the engine chosen for `key`. A refused connection ejects that engine and, for calls
   * safe to repeat, the call goes to the next engine; `idempotent` calls also retry timeouts and 5xx.
   */
  async call<T>(
    key: string | undefined,
    fn: (engine: PoolEngine) => Promise<T>,
    opts: { idempotent: boolean; avoid?: string[]; prompt?: Pick<GenerateInput, 'tokenIds' | 'features'> },
  ): Promise<T> {
    return withRetries(() => this.counted(this.pick(key, opts.avoid, opts.prompt), fn), {
      policy: this.opts.retry ?? DEFAULT_RETRY,
      shouldRetry: (err) => (opts.idempotent ? isTransient(err) : engineIsDown(err)),
      onRetry: (err) => {
        if (engineIsDown(err)) this.eject((err as EngineError).engine, (err as Error).message);
      },
    }).catch((err) => {
      if (engineIsDown(err)) this.eject((err as EngineError).engine, (err as Error).message);
      throw err;
    });
  }

  private async counted<T>(engine: PoolEngine, fn: (engine: PoolEngine) => Promise<T>): Promise<T> {
    this.inFlight.set(engine.url, this.load(engine.url) + 1);
    try {
      return await fn(engine);
    } finally {
      this.inFlight.set(engine.url, this.load(engine.url) - 1);
    }
  }

  /**
   * Generation for one episode turn, routed by the episode id (also sent as x-session-id) or, under
   * cache_aware, by its token ids. Repeated on another engine only when the request never reached a
   * live engine, so a turn is never generated twice.
   */
  generate(
    episodeId: string,
    input: Omit<GenerateInput, 'sessionId'>,
    opts: { avoid?: string[]; onEngine?: (url: string) => void } = {},
  ): Promise<GenerateResult> {
    const extras = featureExtras(input.features);
    const send = async (e: PoolEngine) => {
      // Before the request: a caller that times out while it hangs still knows which engine it was.
      opts.onEngine?.(e.url);
      // Indexed when sent, so the other samples of a GRPO group, sent at once, follow this one.
      this.prefixes?.record(e.url, input.tokenIds, extras);
      const r = await e.generate({ ...input, sessionId: episodeId });
      // The answer is in the engine's cache too: the episode's next turn matches it there and nowhere else.
      this.prefixes?.record(e.url, [...input.tokenIds, ...r.tokenIds], extras);
      return r;
    };
    return this.call(episodeId, send, { idempotent: false, avoid: opts.avoid, prompt: input });
  }

  renderChat(input: RenderChatInput, key?: string): Promise<RenderedPrompt> {
    return this.call(key, (e) => e.renderChat(input), { idempotent: true });
  }

  tokenizeChat(
    input: { messages: ChatMessage[]; tools?: ToolSpec[]; addGenerationPrompt?: boolean },
    key?: string,
  ): Promise<number[]> {
    return this.call(key, (e) => e.tokenizeChat(input), { idempotent: true });
  }

  tokenize(text: string, key?: string): Promise<number[]> {
    return this.call(key, (e) => e.tokenize(text), { idempotent: true });
  }

  detokenize(tokenIds: number[], key?: string): Promise<string> {
    return this.call(key, (e) => e.detokenize(tokenIds), { idempotent: true });
  }

  /** Runs `fn` on every engine that is not ejected, concurrently, each with bounded retries. */
  async fanOut<T>(
    operation: string,
    fn: (engine: PoolEngine) => Promise<T>,
    opts: { throwOnFailure?: boolean } = {},
  ): Promise<FanOutResult<T>[]> {
    const results = await Promise.all(
      this.engines.map(async (e): Promise<FanOutResult<T>> => {
        if (this.down.has(e.url)) return { url: e.url, ok: false, skipped: true, seconds: 0 };
        const t0 = performance.now();
        try {
          const value = await withRetries(() => fn(e), {
            policy: this.opts.retry ?? DEFAULT_RETRY,
            shouldRetry: isTransient,
          });
          return { url: e.url, ok: true, skipped: false, value, seconds: (performance.now() - t0) / 1000 };
        } catch (err) {
          if (engineIsDown(err)) this.eject(e.url, String(err));
          return {
            url: e.url,
            ok: false,
            skipped: false,
            error: (err as Error).message,
            seconds: (performance.now() - t0) / 1000,
          };
        }
      }),
    );
    if ((opts.throwOnFailure ?? true) && results.some((r) => !r.ok && !r.skipped))
      throw new PoolControlError(operation, results);
    return results;
  }

  async resetPrefixCacheAll(): Promise<FanOutResult<boolean>[]> {
    const results = await this.fanOut('reset prefix cache', (e) => e.resetPrefixCache(), { throwOnFailure: false });
    for (const r of results) if (r.ok && r.value) this.prefixes?.forget(r.url);
    if (results.some((r) => !r.ok && !r.skipped)) throw new PoolControlError('reset prefix cache', results);
    return results;
  }

  metricsAll(): Promise<FanOutResult<EngineMetrics>[]> {
    return this.fanOut('metrics', (e) => e.metrics(), { throwOnFailure: false });
  }
}
