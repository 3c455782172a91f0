// A weight sync on a live engine, through the trainer's own sync (the sync_weights activity's code):
// changed weights change the logprobs of a fixed continuation, the engine reports the version it was
// labelled with, and syncing the originals back restores the logprobs.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { tinyModelDir } from '../../base/paths.js';
import { VllmClient } from '../../engine/client.js';
import {
  type TestEngines,
  changedWeightsDir,
  enginePaused,
  engineWeightVersion,
  syncEngineWeights,
  testEngines,
} from '../../testing/engines.js';

let engines: TestEngines;
let client: VllmClient;

before(async () => {
  engines = await testEngines(1);
  client = new VllmClient({ url: engines.urls[0]!, timeoutMs: 300_000 });
});
after(async () => {
  await engines?.stop();
});

async function continuationLogprobs(ids: number[]): Promise<number[]> {
  const r = await client.generate({ tokenIds: ids, sampling: { maxTokens: 1, seed: 0, promptLogprobs: true } });
  assert.equal(r.promptLogprobs?.length, ids.length);
  return r.promptLogprobs!.slice(1) as number[];
}

describe('weight sync (live engine)', () => {
  test('syncing changed weights changes the logprobs of a fixed continuation; syncing the originals restores them', async () => {
    const ids = await client.tokenize('The answer is \\boxed{42}.');
    const before = await continuationLogprobs(ids);
    try {
      syncEngineWeights(engines.urls, changedWeightsDir(), 1);
      assert.equal(await engineWeightVersion(client.url), '1', 'the engine serves the version it was labelled with');
      assert.equal(await enginePaused(client.url), false, 'resumed after the sync');
      const changedLp = await continuationLogprobs(ids);
      assert.ok(
        changedLp.some((lp, i) => Math.abs(lp - before[i]!) > 1e-4),
        'logprobs did not change',
      );
    } finally {
      syncEngineWeights(engines.urls, tinyModelDir(), 2);
    }
    const restored = await continuationLogprobs(ids);
    restored.forEach((lp, i) => assert.ok(Math.abs(lp - before[i]!) < 1e-4, `token ${i}: ${lp} vs ${before[i]}`));
  });
});
