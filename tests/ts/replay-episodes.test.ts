// Replays the committed histories (tests/fixtures/histories/*.json: real episodes, and a trainingRun of
// the async window from tests/ts/run-workflow.test.ts) against today's workflow code with the SDK's
// replayer: a non-deterministic change to either workflow fails here. episode-activity-steps-*.json
// were recorded before the quick steps became local activities: they keep that path replaying. Record again with TEMPO_RL_RECORD_HISTORIES=1 when the change
// is intended (and say so in the commit).
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Worker } from '@temporalio/worker';
import { installTemporalRuntime } from '../../lib/temporal-runtime.js';
import { WORKFLOWS_PATH } from '../../workers/rollout-worker.js';
import { HISTORY_FIXTURES, loadHistoryFixture } from './support/history-fixtures.js';

const files = readdirSync(HISTORY_FIXTURES).filter((f) => (f.startsWith('episode-') || f.startsWith('training-run-')) && f.endsWith('.json')).sort();

test('episode and training-run history fixtures exist', () => {
  assert.ok(files.filter((f) => f.startsWith('episode-')).length >= 2, `expected recorded episode histories in ${HISTORY_FIXTURES}`);
  assert.ok(files.some((f) => f.startsWith('training-run-')), `expected a recorded trainingRun history in ${HISTORY_FIXTURES}`);
});

test('every recorded history replays deterministically', { timeout: 300_000 }, async () => {
  installTemporalRuntime();
  const histories = files.map((f) => loadHistoryFixture(path.join(HISTORY_FIXTURES, f)));
  const failures: string[] = [];
  let replayed = 0;
  for await (const r of Worker.runReplayHistories({ workflowsPath: WORKFLOWS_PATH, bundlerOptions: { ignoreModules: [] } }, histories)) {
    replayed++;
    if (r.error) failures.push(`${r.workflowId}: ${r.error.message}`);
  }
  assert.equal(replayed, files.length);
  assert.deepEqual(failures, []);
});
