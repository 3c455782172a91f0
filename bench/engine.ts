// Engine benchmark (prints numbers; not a test):
//   1. generate tokens/s through VllmClient + EnginePool vs a plain fetch loop, same concurrency (ratio);
//   2. prefix-cache hit rate of 3-turn conversations on 2 engines, round_robin vs consistent_hash.
//
//   node --import tsx bench/engine.ts [--urls U1,U2] [--concurrency 8] [--requests 48] [--max-tokens 32]
//                                     [--episodes 8] [--json]
// Engines: --urls, else TEMPO_RL_TEST_ENGINE_URLS, else the engines recorded in the state directory,
// else two engines started here (and stopped at the end).
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../config/load.js';
import { engineUrls, startEngines, stopEngines } from '../lib/engines.js';
import { VllmClient, samplingParams } from '../lib/vllm/client.js';
import { EnginePool, type RoutingPolicy } from '../lib/vllm/pool.js';
import { messageSuffix } from '../lib/vllm/template.js';
import type { EngineMetrics } from '../lib/vllm/types.js';

const IM_END = 151645;

const { values: args } = parseArgs({
  options: {
    urls: { type: 'string' },
    concurrency: { type: 'string', default: '8' },
    requests: { type: 'string', default: '48' },
    'max-tokens': { type: 'string', default: '32' },
    episodes: { type: 'string', default: '8' },
    json: { type: 'boolean', default: false },
  },
});
const concurrency = Number(args.concurrency);
const requests = Number(args.requests);
const maxTokens = Number(args['max-tokens']);
const episodes = Number(args.episodes);

/** Distinct prompts (no prefix-cache help) of ~`len` ordinary token ids, deterministic per `salt`. */
function prompts(n: number, len: number, salt: number): number[][] {
  let x = 2654435761 ^ salt;
  const next = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0), 1000 + (x % 100_000));
  return Array.from({ length: n }, () => Array.from({ length: len }, next));
}

async function runConcurrently<T>(items: T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<number> {
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
  return ms.reduce((a, m) => ({ hits: a.hits + m.prefixCacheHits, queries: a.queries + m.prefixCacheQueries }), { hits: 0, queries: 0 });
}

async function hitRate(urls: string[], policy: RoutingPolicy, salt: number, suffix: number[]): Promise<{ hit_rate: number; hits: number; queries: number }> {
  const pool = EnginePool.fromUrls(urls, { policy });
  await pool.resetPrefixCacheAll();
  const before = sumMetrics((await pool.metricsAll()).map((r) => r.value!));
  await runConcurrently(prompts(episodes, 192, salt), concurrency, async (prompt, e) => {
    let history = prompt;
    for (let turn = 0; turn < 3; turn++) {
      const r = await pool.generate(`bench/${policy}/${e}`, { tokenIds: history, sampling: { maxTokens: 24, seed: turn } });
      history = [...history, ...r.tokenIds, IM_END, ...suffix];
    }
  });
  const afterM = sumMetrics((await pool.metricsAll()).map((r) => r.value!));
  const hits = afterM.hits - before.hits;
  const queries = afterM.queries - before.queries;
  return { hit_rate: queries ? hits / queries : 0, hits, queries };
}

async function withEngines<T>(fn: (urls: string[]) => Promise<T>): Promise<T> {
  const given = (args.urls ?? process.env.TEMPO_RL_TEST_ENGINE_URLS ?? '').split(',').filter(Boolean);
  const cfg = loadConfig({});
  const recorded = given.length ? given : engineUrls(cfg);
  if (recorded.length >= 2) return fn(recorded.slice(0, 2));
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-bench-'));
  const own = loadConfig({ sets: [`state_dir=${stateDir}`, 'engines.count=2', 'engines.base_port=8190', 'engines.urls=[]'] });
  try {
    const { statuses } = await startEngines(own);
    return await fn(statuses.map((s) => s.url));
  } finally {
    await stopEngines(own);
  }
}

const report = await withEngines(async (urls) => {
  const warm = new VllmClient({ url: urls[0]! });
  await Promise.all(urls.map((u) => new VllmClient({ url: u }).generate({ tokenIds: [1, 2, 3], sampling: { maxTokens: 4 } })));
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
  const suffix = (await messageSuffix(warm, [{ role: 'user', content: 'Wrong answer, try again.' }], { endOfTurnId: IM_END })).tokenIds;
  const roundRobin = await hitRate(urls, 'round_robin', 3, suffix);
  const consistentHash = await hitRate(urls, 'consistent_hash', 4, suffix);
  return {
    engines: urls,
    concurrency,
    requests,
    max_tokens: maxTokens,
    throughput: {
      plain_tokens_per_s: Number(plainTps.toFixed(1)),
      client_pool_tokens_per_s: Number(poolTps.toFixed(1)),
      ratio: Number((poolTps / plainTps).toFixed(3)),
    },
    prefix_cache_3_turns: { episodes, round_robin: roundRobin, consistent_hash: consistentHash },
  };
});

if (args.json) process.stdout.write(`${JSON.stringify(report)}\n`);
else {
  const t = report.throughput;
  const p = report.prefix_cache_3_turns;
  console.log(`engines: ${report.engines.join(', ')}  concurrency ${concurrency}, ${requests} requests × ${maxTokens} tokens`);
  console.log(`tokens/s  plain HTTP loop: ${t.plain_tokens_per_s}  client+pool: ${t.client_pool_tokens_per_s}  ratio: ${t.ratio}`);
  console.log(`prefix-cache hit rate, ${p.episodes} 3-turn conversations on 2 engines:`);
  console.log(`  round_robin:     ${(p.round_robin.hit_rate * 100).toFixed(1)}% (${p.round_robin.hits}/${p.round_robin.queries} tokens)`);
  console.log(`  consistent_hash: ${(p.consistent_hash.hit_rate * 100).toFixed(1)}% (${p.consistent_hash.hits}/${p.consistent_hash.queries} tokens)`);
}
