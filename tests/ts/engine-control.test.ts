// Control routes on a live engine: pause holds generation until resume; reloading changed weights
// changes the logprobs of a fixed continuation (and reloading the originals restores them).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { tinyModelDir } from '../../lib/paths.js';
import { VllmClient } from '../../lib/vllm/client.js';
import { EnginePool } from '../../lib/vllm/pool.js';
import { type TestEngines, changedWeightsDir, testEngines } from './support/engines.js';

let engines: TestEngines;
let client: VllmClient;

before(async () => {
  engines = await testEngines(1);
  client = new VllmClient({ url: engines.urls[0]!, timeoutMs: 300_000 });
});
after(async () => {
  await client?.resume().catch(() => undefined);
  await engines?.stop();
});

async function continuationLogprobs(ids: number[]): Promise<number[]> {
  const r = await client.generate({ tokenIds: ids, sampling: { maxTokens: 1, seed: 0, promptLogprobs: true } });
  assert.equal(r.promptLogprobs?.length, ids.length);
  return r.promptLogprobs!.slice(1) as number[];
}

describe('engine control (live engine)', () => {
  test('pause holds a generate until resume', async () => {
    const pool = new EnginePool([client], { policy: 'round_robin' });
    await pool.pauseAll('keep');
    try {
      assert.equal(await client.isPaused(), true);
      let done = false;
      const pending = client.generate({ tokenIds: [9707, 11, 1879], sampling: { maxTokens: 4, seed: 0 } }).then((r) => ((done = true), r));
      await new Promise((r) => setTimeout(r, 3_000));
      assert.equal(done, false, 'generation went on while paused');
      await pool.resumeAll();
      const r = await pending;
      assert.equal(r.tokenIds.length, 4);
      assert.equal(await client.isPaused(), false);
    } finally {
      await client.resume();
    }
  });

  test('reloading changed weights changes the logprobs of a fixed continuation', async () => {
    const original = tinyModelDir();
    const changed = changedWeightsDir();
    const ids = await client.tokenize('The answer is \\boxed{42}.');
    const pool = new EnginePool([client], { policy: 'round_robin' });
    const before = await continuationLogprobs(ids);
    try {
      await pool.syncWeights(changed);
      const changedLp = await continuationLogprobs(ids);
      assert.ok(changedLp.some((lp, i) => Math.abs(lp - before[i]!) > 1e-4), 'logprobs did not change');
    } finally {
      await pool.syncWeights(original);
    }
    const restored = await continuationLogprobs(ids);
    restored.forEach((lp, i) => assert.ok(Math.abs(lp - before[i]!) < 1e-4, `token ${i}: ${lp} vs ${before[i]}`));
  });
});
