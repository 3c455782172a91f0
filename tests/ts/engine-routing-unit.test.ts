// cache_aware routing with fake engines (no vLLM needed): the prefix index, the router's choice, and
// the pool's use of it (load, exclusions, multi-turn episodes, GRPO groups).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CacheAwareRouter, PrefixIndex, blockHashes, featureExtras } from '../../engine/cache-aware.js';
import { EnginePool } from '../../engine/pool.js';
import { FakeEngine, gate } from '../../testing/fake-engine.js';

/** Deterministic token ids. */
function seq(salt: number, n: number): number[] {
  let x = 2654435761 ^ salt;
  return Array.from({ length: n }, () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0), 1000 + (x % 100_000)));
}

const sampling = { maxTokens: 8 };

function cachePool(
  n: number,
  cacheAware = {},
): { a: FakeEngine; b: FakeEngine; engines: FakeEngine[]; pool: EnginePool } {
  const engines = Array.from({ length: n }, (_, i) => new FakeEngine(`http://${'abcd'[i]}`));
  const pool = new EnginePool(engines, {
    policy: 'cache_aware',
    cacheAware,
    retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 1 },
  });
  return { a: engines[0]!, b: engines[1]!, engines, pool };
}

describe('prefix index', () => {
  test('chained block hashes: equal only while every block before is equal; images count by content', () => {
    const a = seq(1, 64);
    const b = [...a.slice(0, 20), 7, ...a.slice(21)];
    const [ha, hb] = [blockHashes(a, 16), blockHashes(b, 16)];
    assert.equal(ha.length, 4);
    assert.equal(blockHashes(a.slice(0, 63), 16).length, 3, 'a partial block is not indexed');
    assert.equal(ha[0], hb[0]);
    for (const i of [1, 2, 3]) assert.notEqual(ha[i], hb[i]);
    const image = (hash: string) =>
      featureExtras({ mm_hashes: { image: [hash] }, mm_placeholders: { image: [{ offset: 20, length: 8 }] } });
    const [h1, h2] = [blockHashes(a, 16, image('h1')), blockHashes(a, 16, image('h2'))];
    assert.equal(h1[0], h2[0], 'the blocks before the image are shared');
    assert.notEqual(h1[1], h2[1], 'two images behind the same placeholder ids are different prefixes');
  });

  test('bounded: least recently used blocks go first, a sequence loses its end before its start', () => {
    const ix = new PrefixIndex(6);
    const [x, y] = [blockHashes(seq(1, 64), 16), blockHashes(seq(2, 64), 16)];
    ix.insert(x);
    ix.insert(y);
    assert.equal(ix.size, 6);
    assert.equal(ix.matched(y), 4);
    assert.equal(ix.matched(x), 2);
    const router = new CacheAwareRouter({ maxBlocksPerEngine: 64 });
    for (let i = 0; i < 500; i++) router.record('a', seq(100 + i, 80));
    assert.equal(router.indexedBlocks('a'), 64);
    assert.equal(
      router.choose(seq(599, 80), ['b', 'a'], () => 0),
      'a',
      'the latest sequence is still indexed',
    );
  });
});

describe('cache_aware choice', () => {
  test('the longest matched prefix wins while its engine is not busier than the threshold allows', () => {
    const r = new CacheAwareRouter({ balanceThreshold: 4 });
    const p = seq(1, 96);
    r.record('a', p.slice(0, 48));
    r.record('b', p.slice(0, 80));
    r.record('c', seq(2, 160));
    const urls = ['a', 'b', 'c'];
    assert.equal(
      r.choose(p, urls, () => 0),
      'b',
    );
    assert.equal(
      r.choose(p, urls, (u) => (u === 'b' ? 4 : 0)),
      'b',
    );
    // Past the threshold: the least loaded (a and c tie; a's index is smaller).
    assert.equal(
      r.choose(p, urls, (u) => (u === 'b' ? 5 : 0)),
      'a',
    );
    assert.equal(
      r.choose(p, urls, (u) => (u === 'b' ? 5 : u === 'a' ? 2 : 0)),
      'c',
    );
  });

  test('unmatched, or matched only on a shared system prompt: the least-loaded engine', () => {
    const r = new CacheAwareRouter();
    const system = seq(1, 32);
    r.record('a', [...system, ...seq(2, 64)]);
    assert.equal(
      r.choose([...system, ...seq(3, 64)], ['a', 'b'], () => 0),
      'b',
      'a system prompt pulled a new prompt',
    );
    assert.equal(
      r.choose(seq(4, 64), ['a', 'b'], (u) => (u === 'b' ? 1 : 0)),
      'a',
    );
    assert.equal(
      r.choose([], ['a', 'b'], () => 0),
      'b',
      'tie on load: the smaller index',
    );
  });
});

describe('cache_aware pool', () => {
  test('load balance overrides the engine holding the prefix once it is busier by more than the threshold', async () => {
    const { a, b, pool } = cachePool(2, { balanceThreshold: 2 });
    const g = gate();
    a.gate = b.gate = g.promise;
    const prompt = seq(1, 64);
    const seen: string[] = [];
    const sent = Array.from({ length: 5 }, (_, i) =>
      pool.generate(`run/0/0/${i}`, { tokenIds: prompt, sampling }, { onEngine: (u) => seen.push(u) }),
    );
    // a takes the first three (load 2 − 0 is within the threshold); then b, which now holds the prompt too.
    assert.deepEqual(seen, [a.url, a.url, a.url, b.url, b.url]);
    assert.deepEqual([pool.load(a.url), pool.load(b.url)], [3, 2]);
    g.open();
    await Promise.all(sent);
    assert.deepEqual([pool.load(a.url), pool.load(b.url)], [0, 0]);
  });

  test('samples of one GRPO prompt, sent at once, land on one engine; the next prompt on the other', async () => {
    const { a, b, pool } = cachePool(2);
    const g = gate();
    a.gate = b.gate = g.promise;
    const system = seq(9, 32);
    const seen: string[] = [];
    const sent = [0, 1].flatMap((p) => {
      const prompt = [...system, ...seq(p, 64)];
      return Array.from({ length: 4 }, (_, i) =>
        pool.generate(`run/0/${p}/${i}`, { tokenIds: prompt, sampling }, { onEngine: (u) => seen.push(u) }),
      );
    });
    assert.deepEqual(seen, [a.url, a.url, a.url, a.url, b.url, b.url, b.url, b.url]);
    g.open();
    await Promise.all(sent);
  });

  test('exclusions: an ejected, unhealthy or avoided engine is not chosen, and a readmitted one comes back with no index', async () => {
    const { a, b, pool } = cachePool(2);
    const prompt = seq(1, 64);
    assert.equal((await pool.generate('e/0', { tokenIds: prompt, sampling })).engine, a.url);
    assert.equal(pool.pick('e/0', [], { tokenIds: prompt }).url, a.url);
    assert.equal(pool.pick('e/0', [a.url], { tokenIds: prompt }).url, b.url, 'avoid');
    assert.equal(
      pool.pick('e/0', [a.url, b.url], { tokenIds: prompt }).url,
      a.url,
      'every engine avoided: the policy chooses among all',
    );
    pool.eject(a.url, 'test');
    assert.equal((await pool.generate('e/0', { tokenIds: prompt, sampling })).engine, b.url);
    await pool.readmit(a.url);
    assert.equal(pool.pick('e/0', [], { tokenIds: prompt }).url, b.url, 'the readmitted engine kept its old index');
    b.healthy = false;
    await pool.checkHealth();
    await pool.checkHealth();
    assert.equal(pool.isDown(b.url), true);
    assert.equal(pool.pick('e/0', [], { tokenIds: prompt }).url, a.url);
  });

  test('multi-turn: each turn goes where the turns before went; episodes spread when nothing else runs', async () => {
    const { engines, pool } = cachePool(2);
    for (const [i, e] of engines.entries()) e.output = seq(50 + i, 12);
    const suffix = [151645, 198, 151644, 872, 198];
    const used = new Set<string>();
    for (let episode = 0; episode < 4; episode++) {
      let history = seq(episode, 40);
      const seen: string[] = [];
      for (let turn = 0; turn < 3; turn++) {
        const r = await pool.generate(`run/0/${episode}/0`, { tokenIds: history, sampling });
        seen.push(r.engine);
        history = [...history, ...r.tokenIds, ...suffix];
      }
      assert.equal(new Set(seen).size, 1, `episode ${episode} moved: ${seen.join(', ')}`);
      used.add(seen[0]!);
    }
    assert.equal(used.size, 2);
  });

  test('turn 2 of a GRPO sample follows its own answer, not the other copies of its prompt', async () => {
    const { a, b, pool } = cachePool(2, { balanceThreshold: 0 });
    a.output = seq(50, 16);
    b.output = seq(51, 16);
    const prompt = seq(1, 32);
    const g = gate();
    a.gate = b.gate = g.promise;
    const first = [0, 1].map((i) => pool.generate(`run/0/0/${i}`, { tokenIds: prompt, sampling }));
    g.open();
    const [r0, r1] = await Promise.all(first);
    assert.deepEqual([r0!.engine, r1!.engine], [a.url, b.url]);
    // b is now busier: only the longer match (prompt + its answer) keeps sample 1 there.
    const hold = gate();
    b.gate = hold.promise;
    const busy = pool.generate('other', { tokenIds: seq(7, 8), sampling }, { avoid: [a.url] });
    assert.equal(
      pool.pick(undefined, [], { tokenIds: [...prompt, ...r1!.tokenIds, 151645] }).url,
      a.url,
      'over the threshold: least loaded',
    );
    hold.open();
    await busy;
    assert.equal(
      (await pool.generate('run/0/0/1', { tokenIds: [...prompt, ...r1!.tokenIds, 151645], sampling })).engine,
      b.url,
    );
    assert.equal(
      (await pool.generate('run/0/0/0', { tokenIds: [...prompt, ...r0!.tokenIds, 151645], sampling })).engine,
      a.url,
    );
  });

  test('deterministic for the same request sequence; a prefix-cache reset empties the index', async () => {
    const run = async () => {
      const { pool } = cachePool(3);
      const out: string[] = [];
      for (let i = 0; i < 30; i++) {
        const ids = [...seq(i % 5, 48), ...seq(i, (i * 7) % 40)];
        out.push((await pool.generate(`e/${i}`, { tokenIds: ids, sampling })).engine);
      }
      return out;
    };
    const first = await run();
    assert.deepEqual(await run(), first);
    assert.ok(new Set(first).size === 3, first.join(' '));
    const { a, b, pool } = cachePool(2);
    const prompt = seq(1, 64);
    await pool.generate('x', { tokenIds: seq(2, 64), sampling });
    assert.equal((await pool.generate('y', { tokenIds: prompt, sampling })).engine, b.url);
    assert.equal(pool.pick('y', [], { tokenIds: prompt }).url, b.url);
    await pool.resetPrefixCacheAll();
    assert.equal(pool.pick('y', [], { tokenIds: prompt }).url, a.url);
  });
});
