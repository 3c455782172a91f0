// The line `tempo-rl train` prints for each finished step: its time split, and the trainer's GPU memory
// and checkpoint where the step's metrics have them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stepSummary } from '../../cli/run-command.js';

const base = { 'perf/step_time': 30, 'perf/rollout_time': 20, 'perf/train_time': 8, 'perf/weight_sync_time': 1 };

test('a CPU step: the time split, no memory', () => {
  const line = stepSummary(3, { ...base, 'perf/checkpoint_seconds': 0.4 });
  assert.match(line, /^step 3 took 30\.0 s: rollout 20\.0 s, train 8\.0 s, checkpoint 0\.4 s, weight sync 1\.0 s/);
  assert.doesNotMatch(line, /GPU|background/);
});

test("a GPU step: the trainer's peak memory and the allocator's retries, a checkpoint written in the background", () => {
  const line = stepSummary(4, {
    ...base,
    'perf/train_peak_allocated_gib': 61.24,
    'perf/train_alloc_retries': 3,
    'perf/checkpoint_seconds': 0.01,
    'perf/checkpoint_snapshot_seconds': 1.3,
  });
  assert.match(line, /train 8\.0 s \(GPU peak 61\.2 GiB, 3 allocator retries\)/);
  assert.match(line, /checkpoint 1\.3 s to host memory, written in the background/);
  assert.match(stepSummary(5, { ...base, 'perf/train_peak_allocated_gib': 40 }), /\(GPU peak 40\.0 GiB\)/);
});
