// A rollout worker refuses, retryably and naming both roots, work whose run keeps its samples in a
// blob store other than the worker's (a worker of another stack that took the task).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { ApplicationFailure } from '@temporalio/common';
import { LocalBlobStore } from '../../lib/blobstore.js';
import { sampleActivities, type StoreSampleInput } from '../../activities/sample.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-test-blob-root-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
const ownRoot = path.join(tmp, 'a', 'blobs');
const otherRoot = path.join(tmp, 'b', 'blobs');
const acts = sampleActivities({ store: new LocalBlobStore(ownRoot) });

const input: StoreSampleInput = {
  episode_id: 'r/0/0/0', run_id: 'r', step: 0, prompt_index: 0, sample_index: 0, prompt_ref: null,
  limits: { max_response_len: 16, max_context_len: 64 }, conventions: null, turns: [], images: [], reward: 0,
  status: 'FAILED', truncated_reason: 'no turns', temperature: 1, label: '1', expected: { response_len: 0, mask_sum: 0 },
};

function refusedNamingBoth(work: string) {
  return (err: unknown) => {
    assert.ok(err instanceof ApplicationFailure, `an ApplicationFailure, given ${String(err)}`);
    assert.equal(err.type, 'BlobRootUnreachable');
    assert.equal(err.nonRetryable, false);
    assert.ok(err.message.includes(work), err.message);
    assert.ok(err.message.includes(`given blob store ${otherRoot}`), err.message);
    assert.ok(err.message.includes(`this rollout worker's blob store is ${pathToFileURL(ownRoot).href}`), err.message);
    return true;
  };
}

test('storeSample of a run whose blob root is not the worker\'s is refused, and writes nothing', async () => {
  await assert.rejects(acts.storeSample({ ...input, blob_root: otherRoot }), refusedNamingBoth('storeSample of episode r/0/0/0'));
  assert.equal(existsSync(ownRoot), false);
  assert.equal(existsSync(otherRoot), false);
});

test('loadEpisodeSummary of another stack\'s run is refused rather than answered "not stored"', async () => {
  await assert.rejects(acts.loadEpisodeSummary({ episode_id: 'r/0/0/0', blob_root: otherRoot }), refusedNamingBoth('loadEpisodeSummary of episode r/0/0/0'));
});

test('the worker\'s own blob root (however spelled) and an absent one (older histories) are let through', async () => {
  const stored = await acts.storeSample({ ...input, blob_root: `${path.join(tmp, 'a', '..', 'a', 'blobs')}/` });
  assert.equal(stored.sample_ref, 'blob:named/samples/r/0/0/0.json');
  assert.ok(existsSync(path.join(ownRoot, 'named', 'samples', 'r', '0', '0', '0.json')));
  assert.equal((await acts.loadEpisodeSummary({ episode_id: 'r/0/0/0' }))?.status, 'FAILED');
});

test('blob_store (a URI) is compared parsed: a file: URL of the own root passes, an S3 store or a bad URI is refused', async () => {
  const stored = await acts.storeSample({ ...input, episode_id: 'r/0/0/1', sample_index: 1, blob_store: pathToFileURL(ownRoot).href, blob_root: otherRoot });
  assert.equal(stored.sample_ref, 'blob:named/samples/r/0/0/1.json');
  for (const foreign of ['s3://bucket/blobs', 'gs://bucket', `file://${ownRoot}x`]) {
    await assert.rejects(acts.loadEpisodeSummary({ episode_id: 'r/0/0/1', blob_store: foreign }), (err: unknown) => {
      assert.ok(err instanceof ApplicationFailure && err.type === 'BlobRootUnreachable', String(err));
      assert.ok(err.message.includes(`given blob store ${foreign}`), err.message);
      return true;
    });
  }
});
