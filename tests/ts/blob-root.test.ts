// A rollout worker refuses, retryably and naming both stores, work whose run keeps its samples in a
// blob store other than the worker's (a worker of another stack that took the task). The run's store
// travels as blob_store, a store URI, compared parsed.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { ApplicationFailure } from '@temporalio/common';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { sampleActivities } from '../../activities/sample.js';
import type { StoreSampleInput } from '../../protocol/activities.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-test-blob-root-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
const ownRoot = path.join(tmp, 'a', 'blobs');
const otherStore = pathToFileURL(path.join(tmp, 'b', 'blobs')).href;
const acts = sampleActivities({ store: new LocalBlobStore(ownRoot) });

const input: StoreSampleInput = {
  episode_id: 'r/0/0/0',
  run_id: 'r',
  step: 0,
  prompt_index: 0,
  sample_index: 0,
  prompt_ref: null,
  trajectory_ref: null,
  limits: { max_response_len: 16, max_context_len: 64 },
  turns: [],
  images: [],
  reward: 0,
  environment: 'geo3k',
  status: 'FAILED',
  truncated_reason: 'no turns',
  temperature: 1,
  label: '1',
};

function refusedNamingBoth(work: string, given: string) {
  return (err: unknown) => {
    assert.ok(err instanceof ApplicationFailure, `an ApplicationFailure, given ${String(err)}`);
    assert.equal(err.type, 'BlobRootUnreachable');
    assert.equal(err.nonRetryable, false);
    assert.ok(err.message.includes(work), err.message);
    assert.ok(err.message.includes(`given blob store ${given}`), err.message);
    assert.ok(err.message.includes(`this rollout worker's blob store is ${pathToFileURL(ownRoot).href}`), err.message);
    return true;
  };
}

test("storeSample of a run whose blob store is not the worker's is refused, and writes nothing", async () => {
  await assert.rejects(
    acts.storeSample({ ...input, blob_store: otherStore }),
    refusedNamingBoth('storeSample of episode r/0/0/0', otherStore),
  );
  assert.equal(existsSync(ownRoot), false);
  assert.equal(existsSync(path.join(tmp, 'b')), false);
});

test('loadEpisodeSummary of another stack\'s run is refused rather than answered "not stored"', async () => {
  await assert.rejects(
    acts.loadEpisodeSummary({ episode_id: 'r/0/0/0', blob_store: otherStore }),
    refusedNamingBoth('loadEpisodeSummary of episode r/0/0/0', otherStore),
  );
});

test("the worker's own store (however spelled) and an absent one (work started by hand) are let through", async () => {
  const stored = await acts.storeSample({
    ...input,
    blob_store: pathToFileURL(`${path.join(tmp, 'a', '..', 'a', 'blobs')}/`).href,
  });
  assert.equal(stored.sample_ref, 'blob:named/samples/r/0/0/0.json');
  assert.ok(existsSync(path.join(ownRoot, 'named', 'samples', 'r', '0', '0', '0.json')));
  assert.equal((await acts.loadEpisodeSummary({ episode_id: 'r/0/0/0' }))?.status, 'FAILED');
});

test('an S3 store, another scheme or another path is refused; a bad URI too', async () => {
  for (const foreign of ['s3://bucket/blobs', 'gs://bucket', `file://${ownRoot}x`, 'not a uri']) {
    await assert.rejects(
      acts.loadEpisodeSummary({ episode_id: 'r/0/0/0', blob_store: foreign }),
      refusedNamingBoth('loadEpisodeSummary of episode r/0/0/0', foreign),
    );
  }
});
