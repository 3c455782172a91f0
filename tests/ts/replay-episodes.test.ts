// Replays the committed histories (tests/fixtures/histories/*.json) against today's workflow code with
// the SDK's replayer: a non-deterministic change to the episode or trainingRun workflow fails here.
// The histories are the first release's baseline; each is written by the test that ran it, when
// TEMPO_RL_RECORD_HISTORIES=1 is set (testing/history-fixtures.ts):
//   episode-tool-call-correct, episode-wrong-until-out-of-turns, episode-single-turn-scored:
//     tests/ts/episode-workflow.test.ts (scripted engine);
//   episode-worker-killed-in-turn-2: tests/ts/episode-durability.test.ts;
//   training-run-sync-with-eval, training-run-async-window, training-run-sft-render-ahead:
//     tests/ts/run-workflow.test.ts (stand-in trainer and engine);
//   episode-live-*, training-run-sft: the live-engine tests (episode-live, environments-live, run-sft);
//   training-run-certified-sync-reference-<i> (each workflow run of a 3-step run, with an eval and
//     continue-as-new after each step), episode-certified-sync-reference: the deterministic reference
//     run of bench/certify.ts (the 3-step run of the matrix); the async ones: …-async-reference-….
// To record again after an intended change:
//   TEMPO_RL_RECORD_HISTORIES=1 node --import tsx --test --test-concurrency=1 tests/ts/episode-workflow.test.ts \
//     tests/ts/episode-durability.test.ts tests/ts/run-workflow.test.ts
//   TEMPO_RL_RECORD_HISTORIES=1 node --import tsx bench/certify.ts both --references
// then run this test, and say in the commit that the histories were recorded again.
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Worker } from '@temporalio/worker';
import { installTemporalRuntime } from '../../rollout/temporal-runtime.js';
import { WORKFLOWS_PATH } from '../../rollout/worker.js';
import { HISTORY_FIXTURES, loadHistoryFixture } from '../../testing/history-fixtures.js';

const files = readdirSync(HISTORY_FIXTURES)
  .filter((f) => (f.startsWith('episode-') || f.startsWith('training-run-')) && f.endsWith('.json'))
  .sort();

test('episode and training-run history fixtures exist', () => {
  assert.ok(
    files.filter((f) => f.startsWith('episode-')).length >= 2,
    `expected recorded episode histories in ${HISTORY_FIXTURES}`,
  );
  assert.ok(
    files.some((f) => f.startsWith('training-run-')),
    `expected a recorded trainingRun history in ${HISTORY_FIXTURES}`,
  );
});

test('every recorded history replays deterministically', { timeout: 300_000 }, async () => {
  installTemporalRuntime();
  const histories = files.map((f) => loadHistoryFixture(path.join(HISTORY_FIXTURES, f)));
  const failures: string[] = [];
  let replayed = 0;
  for await (const r of Worker.runReplayHistories(
    { workflowsPath: WORKFLOWS_PATH, bundlerOptions: { ignoreModules: [] } },
    histories,
  )) {
    replayed++;
    if (r.error) failures.push(`${r.workflowId}: ${r.error.message}`);
  }
  assert.equal(replayed, files.length);
  assert.deepEqual(failures, []);
});
