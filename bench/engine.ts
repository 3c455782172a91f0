// Engine benchmark (prints numbers; not a test):
//   1. generate tokens/s through VllmClient + EnginePool vs a plain fetch loop, same concurrency (ratio);
//   2. a GRPO step's rollout on 2 engines under each routing policy: prefix-cache hit rate (vLLM's
//      /metrics) and wall time. --prompts prompts × --samples samples, --turns turns each, at most
//      --episode-concurrency episodes in flight (rollout.concurrency), prompt-major as a step starts them.
//
//   node --import tsx bench/engine.ts [--urls U1,U2] [--part 1|2] [--concurrency 8] [--requests 48]
//        [--max-tokens 32] [--prompts 8] [--samples 8] [--turns 3] [--turn-tokens 48]
//        [--episode-concurrency 16] [--rounds 1] [--balance-threshold N] [--json]
// Engines: --urls (or TEMPO_RL_TEST_ENGINE_URLS), used as given and never stopped: part 1 on them all,
// part 2 on the first two (it needs two: with one, only part 1 runs, and --part 2 is refused); else the
// engines recorded in the state directory when there are two; else two engines started here (and
// stopped at the end).
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../config/load.js';
import { engineUrls, startEngines, stopEngines } from '../supervise/engines.js';
import { CACHE_AWARE_DEFAULTS } from '../engine/cache-aware.js';
import { VllmClient, samplingParams } from '../engine/client.js';
import { EnginePool, type RoutingPolicy } from '../engine/pool.js';
import { messageSuffix } from '../engine/template.js';
import type { EngineMetrics } from '../engine/types.js';

const IM_END = 151645;

const { values: args } = parseArgs({
  options: {
    urls: { type: 'string' },
    concurrency: { type: 'string', default: '8' },
    requests: { type: 'string', default: '48' },
    'max-tokens': { type: 'string', default: '32' },
    part: { type: 'string' },
    prompts: { type: 'string', default: '8' },
    samples: { type: 'string', default: '8' },
    turns: { type: 'string', default: '3' },
    'turn-tokens': { type: 'string', default: '48' },
    'episode-concurrency': { type: 'string', default: '16' },
    rounds: { type: 'string', default: '1' },
    'balance-threshold': { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});
const concurrency = Number(args.concurrency);
const requests = Number(args.requests);
const maxTokens = Number(args['max-tokens']);
const step = {
  prompts: Number(args.prompts),
  samples: Number(args.samples),
  turns: Number(args.turns),
  turnTokens: Number(args['turn-tokens']),
  concurrency: Number(args['episode-concurrency']),
};
const rounds = Number(args.rounds);
const cacheAware =
  args['balance-threshold'] === undefined ? {} : { balanceThreshold: Number(args['balance-threshold']) };
const POLICIES: RoutingPolicy[] = ['round_robin', 'consistent_hash', 'cache_aware'];
/** Figures of the same measurement elsewhere (hit rates; vime: vllm-project/vime PR #120). */
const EARLIER: Record<RoutingPolicy, { vime: string; tempo: string }> = {
  round_robin: { vime: '63.4%', tempo: '36.8%' },
  consistent_hash: { vime: '82.6%', tempo: '59.8%' },
  cache_aware: { vime: '—', tempo: '—' },
};

/** Distinct prompts (no prefix-cache help) of ~`len` ordinary token ids, deterministic per `salt`. */
function prompts(n: number, len: number, salt: number): number[][] {
  let x = 2654435761 ^ salt;
  const next = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0), 1000 + (x % 100_000));
  return Array.from({ length: n }, () => Array.from({ length: len }, next));
}

async function runConcurrently<T>(
  items: T[],
  limit: number,
  fn: (item: T, i: number) => Promise<void>,
): Promise<number> {
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
  return (performance.now() - t0) / 1000;
}

async function plainLoop(urls: string[], ps: number[][]): Promise<{ tokens: number; seconds: number }> {
  let tokens = 0;
  const seconds = await runConcurrently(ps, concurrency, async (ids, i) => {
    const res = await fetch(`${urls[i % urls.length]}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token_ids: ids, sampling_params: samplingParams({ maxTokens, seed: i }) }),
    });
    if (!res.ok) throw new Error(`plain generate: HTTP ${res.status}`);
    const body = (await res.json()) as { choices: Array<{ token_ids: number[] }> };
    tokens += body.choices[0]!.token_ids.length;
  });
  return { tokens, seconds };
}

async function poolLoop(pool: EnginePool, ps: number[][]): Promise<{ tokens: number; seconds: number }> {
  let tokens = 0;
  const seconds = await runConcurrently(ps, concurrency, async (ids, i) => {
    const r = await pool.generate(`bench/${i}`, { tokenIds: ids, sampling: { maxTokens, seed: i } });
    tokens += r.tokenIds.length;
  });
  return { tokens, seconds };
}

function sumMetrics(ms: EngineMetrics[]): { hits: number; queries: number } {
  return ms.reduce((a, m) => ({ hits: a.hits + m.prefixCacheHits, queries: a.queries + m.prefixCacheQueries }), {
    hits: 0,
    queries: 0,
  });
}

/** A step's prompts: a system prompt they all share (template, tools), then each prompt's own image
 *  placeholders and question (distinct ids), 256–448 tokens. */
function stepPrompts(): number[][] {
  const [system] = prompts(1, 128, 5);
  return prompts(step.prompts, 448, 6).map((own, i) => [...system!, ...own.slice(0, 256 + ((i * 67) % 193))]);
}

async function resetPrefixCaches(pool: EnginePool): Promise<void> {
  for (let attempt = 0; attempt < 10; attempt++) {
    if ((await pool.resetPrefixCacheAll()).every((r) => r.value)) return;
    await new Promise((r) => setTimeout(r, 1000));
  }
  throw new Error('the prefix caches could not be reset');
}

type Throughput = Awaited<ReturnType<typeof throughput>>;
type Rates = Record<RoutingPolicy, StepResult & { hit_rate: number }>;

interface StepResult {
  hits: number;
  queries: number;
  seconds: number;
  /** Turns sent to another engine than the episode's turn before. */
  moves: number;
  /** The machine's 1-minute load average when the step ended. */
  load1: number;
}

async function grpoStep(urls: string[], policy: RoutingPolicy, ps: number[][], suffix: number[]): Promise<StepResult> {
  const pool = EnginePool.fromUrls(urls, { policy, cacheAware });
  await resetPrefixCaches(pool);
  const before = sumMetrics((await pool.metricsAll()).map((r) => r.value!));
  const episodes = ps.flatMap((prompt, p) =>
    Array.from({ length: step.samples }, (_, s) => ({ id: `bench/0/${p}/${s}`, prompt, seed: p * 1000 + s * 10 })),
  );
  let moves = 0;
  const seconds = await runConcurrently(episodes, step.concurrency, async (ep) => {
    let history = ep.prompt;
    let last: string | null = null;
    for (let turn = 0; turn < step.turns; turn++) {
      const r = await pool.generate(ep.id, {
        tokenIds: history,
        sampling: { maxTokens: step.turnTokens, seed: ep.seed + turn },
      });
      if (last !== null && r.engine !== last) moves++;
      last = r.engine;
      history = [...history, ...r.tokenIds, IM_END, ...suffix];
    }
  });
  const after = sumMetrics((await pool.metricsAll()).map((r) => r.value!));
  return {
    hits: after.hits - before.hits,
    queries: after.queries - before.queries,
    seconds,
    moves,
    load1: os.loadavg()[0]!,
  };
}

/** Every policy on the same step, `rounds` times, in alternating order (load from elsewhere hits all alike). */
async function routing(urls: string[], suffix: number[]): Promise<Rates> {
  const ps = stepPrompts();
  const sum = Object.fromEntries(
    POLICIES.map((p) => [p, { hits: 0, queries: 0, seconds: 0, moves: 0, load1: 0 }]),
  ) as Record<RoutingPolicy, StepResult>;
  for (let round = 0; round < rounds; round++) {
    for (const policy of round % 2 ? [...POLICIES].reverse() : POLICIES) {
      const r = await grpoStep(urls, policy, ps, suffix);
      for (const k of ['hits', 'queries', 'seconds', 'moves', 'load1'] as const) sum[policy][k] += r[k];
    }
  }
  return Object.fromEntries(
    POLICIES.map((p) => {
      const r = sum[p];
      return [
        p,
        {
          hit_rate: r.queries ? r.hits / r.queries : 0,
          hits: r.hits,
          queries: r.queries,
          seconds: Number((r.seconds / rounds).toFixed(2)),
          moves: r.moves,
          load1: Number((r.load1 / rounds).toFixed(2)),
        },
      ];
    }),
  ) as Rates;
}

/** The engines given (--urls, else TEMPO_RL_TEST_ENGINE_URLS), each checked to be a URL. */
function givenUrls(): string[] {
  const text = args.urls ?? process.env.TEMPO_RL_TEST_ENGINE_URLS ?? '';
  const urls = text.split(',').filter(Boolean);
  for (const u of urls)
    if (!URL.canParse(u) || !/^https?:$/.test(new URL(u).protocol))
      throw new Error(`--urls: not an http(s) URL: ${JSON.stringify(u)}`);
  return urls;
}

async function withEngines<T>(fn: (urls: string[]) => Promise<T>): Promise<T> {
  const given = givenUrls();
  if (given.length) return fn(given);
  const recorded = engineUrls(loadConfig({}));
  if (recorded.length >= 2) return fn(recorded.slice(0, 2));
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-bench-'));
  const own = loadConfig({
    sets: [`state_dir=${stateDir}`, 'engines.count=2', 'engines.base_port=8190', 'engines.urls=[]'],
  });
  try {
    const { statuses } = await startEngines(own);
    return await fn(statuses.map((s) => s.url));
  } finally {
    await stopEngines(own);
  }
}

async function throughput(urls: string[]) {
  // Alternating rounds, so load from anything else on the machine hits both sides alike.
  const plain = { tokens: 0, seconds: 0 };
  const pooled = { tokens: 0, seconds: 0 };
  const pool = EnginePool.fromUrls(urls, { policy: 'round_robin' });
  for (let round = 0; round < 2; round++) {
    for (const [acc, run] of [
      [plain, () => plainLoop(urls, prompts(requests, 64, 10 + round))],
      [pooled, () => poolLoop(pool, prompts(requests, 64, 20 + round))],
    ] as const) {
      const r = await run();
      acc.tokens += r.tokens;
      acc.seconds += r.seconds;
    }
  }
  const plainTps = plain.tokens / plain.seconds;
  const poolTps = pooled.tokens / pooled.seconds;
  return {
    concurrency,
    requests,
    max_tokens: maxTokens,
    plain_tokens_per_s: Number(plainTps.toFixed(1)),
    client_pool_tokens_per_s: Number(poolTps.toFixed(1)),
    ratio: Number((poolTps / plainTps).toFixed(3)),
  };
}

const loadavg = () => os.loadavg().map((v) => Number(v.toFixed(2)));

const report = await withEngines(async (urls) => {
  const routingUrls = urls.slice(0, 2);
  const runRouting = args.part !== '1' && routingUrls.length === 2;
  if (args.part === '2' && !runRouting)
    throw new Error(`--part 2 (routing between engines) needs two engines; --urls gave ${urls.length}`);
  const warm = new VllmClient({ url: urls[0]! });
  await Promise.all(
    urls.map((u) => new VllmClient({ url: u }).generate({ tokenIds: [1, 2, 3], sampling: { maxTokens: 4 } })),
  );
  const out: {
    engines: string[];
    throughput?: Throughput & { loadavg: number[] };
    routing?: typeof step & {
      rounds: number;
      balance_threshold: number;
      policies: Rates;
      prompt_tokens: number[];
      observation_tokens: number;
      loadavg: number[];
    };
    routing_skipped?: string;
  } = { engines: urls };
  if (args.part !== '1' && !runRouting) out.routing_skipped = 'part 2 needs two engines; one was given';
  if (args.part !== '2') out.throughput = { ...(await throughput(urls)), loadavg: loadavg() };
  if (runRouting) {
    // A tool's answer as the observation between turns (the template's tokens for a user message).
    const suffix = (
      await messageSuffix(
        warm,
        [{ role: 'user', content: '<tool_response>\nWrong answer, try again.\n</tool_response>' }],
        { endOfTurnId: IM_END },
      )
    ).tokenIds;
    const policies = await routing(routingUrls, suffix);
    out.routing = {
      ...step,
      rounds,
      balance_threshold: cacheAware.balanceThreshold ?? CACHE_AWARE_DEFAULTS.balanceThreshold,
      prompt_tokens: stepPrompts().map((p) => p.length),
      observation_tokens: suffix.length,
      policies,
      loadavg: loadavg(),
    };
  }
  return out;
});

if (args.json) process.stdout.write(`${JSON.stringify(report)}\n`);
else {
  console.log(`engines: ${report.engines.join(', ')}`);
  const t = report.throughput;
  if (t) {
    console.log(
      `concurrency ${concurrency}, ${requests} requests × ${maxTokens} tokens; load average ${t.loadavg.join(' ')}`,
    );
    console.log(
      `tokens/s  plain HTTP loop: ${t.plain_tokens_per_s}  client+pool: ${t.client_pool_tokens_per_s}  ratio: ${t.ratio}\n`,
    );
  }
  const r = report.routing;
  if (r) {
    const lens = r.prompt_tokens;
    console.log(
      `GRPO step on 2 engines: ${step.prompts} prompts × ${step.samples} samples × ${step.turns} turns, ≤ ${step.turnTokens} tokens a turn, ` +
        `${step.concurrency} episodes in flight; prompts ${Math.min(...lens)}–${Math.max(...lens)} tokens (128 shared), observation ${r.observation_tokens} tokens` +
        `; cache_aware balance threshold ${r.balance_threshold}${rounds > 1 ? `; ${rounds} rounds` : ''}; load average ${r.loadavg.join(' ')}\n`,
    );
    console.log(
      '| policy | prefix-cache hit rate | rollout wall time | turns that changed engine | load average (1 min) | vime PR #120 | tempo-rl before |',
    );
    console.log('| --- | --- | --- | --- | --- | --- | --- |');
    for (const p of POLICIES) {
      const x = r.policies[p];
      console.log(
        `| ${p} | ${(x.hit_rate * 100).toFixed(1)}% (${x.hits}/${x.queries}) | ${x.seconds.toFixed(1)} s | ${x.moves} | ${x.load1} | ${EARLIER[p].vime} | ${EARLIER[p].tempo} |`,
      );
    }
  }
}
