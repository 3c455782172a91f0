// The engine pool over two live engines: consistent_hash keeps an episode's turns on one engine,
// cache_aware gets at least round_robin's prefix-cache hit rate on a small GRPO-like step, and a
// killed engine is ejected, its episodes' next calls go to the other engine, and it is readmitted.
// "Killed" = the TCP proxy in front of it closes, which the client sees exactly as a dead process
// (connection refused) while the engines the suite shares keep running.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { VllmClient } from '../../engine/client.js';
import { EnginePool, type RoutingPolicy } from '../../engine/pool.js';
import { type TestEngines, testEngines } from '../../testing/engines.js';
import { type TcpProxy, tcpProxy } from '../../testing/tcp-proxy.js';

let engines: TestEngines;
let proxies: TcpProxy[];

before(async () => {
  engines = await testEngines(2);
  proxies = await Promise.all(engines.urls.map((u) => tcpProxy(u)));
});
after(async () => {
  await Promise.all((proxies ?? []).map((p) => p.kill()));
  await engines?.stop();
});

function pool(policy: RoutingPolicy): EnginePool {
  const clients = proxies.map((p) => new VllmClient({ url: p.url, timeoutMs: 120_000 }));
  return new EnginePool(clients, { policy, retry: { attempts: 3, baseDelayMs: 50, maxDelayMs: 200 } });
}

async function hitsAndQueries(p: EnginePool): Promise<{ hits: number; queries: number }> {
  const ms = (await p.metricsAll()).map((r) => r.value!);
  return {
    hits: ms.reduce((a, m) => a + m.prefixCacheHits, 0),
    queries: ms.reduce((a, m) => a + m.prefixCacheQueries, 0),
  };
}

async function episodeTurns(p: EnginePool, episode: string, prompt: number[], turns: number): Promise<string[]> {
  const seen: string[] = [];
  let history = prompt;
  for (let t = 0; t < turns; t++) {
    const r = await p.generate(episode, { tokenIds: history, sampling: { maxTokens: 3, seed: t } });
    seen.push(r.engine);
    history = [...history, ...r.tokenIds, 151645, 198];
  }
  return seen;
}

describe('engine pool (two live engines)', () => {
  test('consistent_hash keeps every turn of an episode on one engine; round_robin spreads them', async () => {
    const hashed = pool('consistent_hash');
    const prompt = await new VllmClient({ url: engines.urls[0]! }).tokenize('Find x in the triangle.');
    // The proxies' ports are random, so which engine owns a key is too: take the first three keys
    // each engine owns rather than six fixed keys (which all land on one engine 3% of the time).
    const keys = Array.from({ length: 64 }, (_, i) => `run/0/${i}/0`);
    const chosen = proxies.flatMap((x) => keys.filter((k) => hashed.pick(k).url === x.url).slice(0, 3));
    assert.equal(chosen.length, 6, 'the hash gave one engine fewer than 3 of 64 keys');
    const used = new Set<string>();
    for (const key of chosen) {
      const seen = await episodeTurns(hashed, key, prompt, 3);
      assert.equal(new Set(seen).size, 1, `episode ${key} moved: ${seen.join(', ')}`);
      assert.equal(seen[0], hashed.pick(key).url, `episode ${key} ran off its hashed engine`);
      used.add(seen[0]!);
    }
    assert.equal(used.size, 2, 'the episodes did not use both engines');
    const spread = await episodeTurns(pool('round_robin'), 'run/0/0/0', prompt, 2);
    assert.notEqual(spread[0], spread[1]);
  });

  test("cache_aware: a prefix-cache hit rate at least round_robin's on 2 prompts × 4 samples × 3 turns", async () => {
    const system = Array.from({ length: 48 }, (_, i) => 1000 + i);
    const prompts = [0, 1].map((p) => [...system, ...Array.from({ length: 112 }, (_, i) => 5000 + 997 * p + i)]);
    const step = async (policy: RoutingPolicy) => {
      const p = pool(policy);
      const reset = await p.resetPrefixCacheAll();
      assert.ok(
        reset.every((r) => r.value),
        'a prefix cache was not reset',
      );
      const before = await hitsAndQueries(p);
      const engines = await Promise.all(
        prompts.flatMap((prompt, i) =>
          Array.from({ length: 4 }, (_, s) => episodeTurns(p, `run/2/${i}/${s}`, prompt, 3)),
        ),
      );
      const after = await hitsAndQueries(p);
      return { rate: (after.hits - before.hits) / (after.queries - before.queries), engines };
    };
    const rr = await step('round_robin');
    const ca = await step('cache_aware');
    assert.ok(ca.rate >= rr.rate, `cache_aware ${ca.rate.toFixed(3)} < round_robin ${rr.rate.toFixed(3)}`);
    for (const seen of ca.engines)
      assert.equal(new Set(seen).size, 1, `a cache_aware episode moved: ${seen.join(', ')}`);
    assert.equal(new Set(ca.engines.flat()).size, 2, 'cache_aware used one engine');
  });

  test('a killed engine is ejected, its episodes go to the other engine, and it is readmitted', async () => {
    const p = pool('consistent_hash');
    const prompt = [9707, 11, 1879, 0];
    const owner = (episode: string) => p.pick(episode).url;
    const victim = proxies[1]!;
    const episodes = Array.from({ length: 12 }, (_, i) => `run/1/${i}/0`);
    const onVictim = episodes.filter((e) => owner(e) === victim.url);
    const onSurvivor = episodes.filter((e) => owner(e) !== victim.url);
    assert.ok(onVictim.length > 0 && onSurvivor.length > 0, 'all 12 episodes hash to one engine');

    await victim.kill();
    const r = await p.generate(onVictim[0]!, { tokenIds: prompt, sampling: { maxTokens: 2, seed: 0 } });
    assert.equal(r.engine, proxies[0]!.url, 'the call did not move to the surviving engine');
    assert.equal(p.isDown(victim.url), true);
    for (const e of onVictim) assert.equal(owner(e), proxies[0]!.url);
    for (const e of onSurvivor) assert.equal(owner(e), proxies[0]!.url, 'a key of the surviving engine moved');

    await victim.revive();
    await p.checkHealth();
    assert.equal(p.isDown(victim.url), false, 'not readmitted');
    for (const e of onVictim) assert.equal(owner(e), victim.url, 'keys did not come back after readmission');
  });
});
