// The trainingRun workflow on TestWorkflowEnvironment with stand-in trainer activities and a scripted
// engine (testing/run-standins.ts): the synchronous run with eval, pause now, the async
// window (overlap, staleness bound, continue-as-new, pause / stop / continue, an all-failed batch),
// and refusals that leave no event. Seconds, not minutes: the real trainer and engines are in
// run-*.test.ts and chaos.test.ts.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { readStepRecords } from '../../activities/run.js';
import { runDir } from '../../stores/layout.js';
import { EngineRequestError } from '../../activities/episode-engines.js';
import { activityCalls } from '../../client/audit.js';
import { controlRun } from '../../client/run-client.js';
import { parseEpisodeId } from '../../protocol/episode.js';
import { trainingRunWorkflowId, type RunResult } from '../../protocol/training-run.js';
import { recordHistory } from '../../testing/history-fixtures.js';
import { waitForProgress } from '../../testing/run.js';
import { startStandinRuns, type StandinRuns } from '../../testing/run-standins.js';

let h: StandinRuns;
before(async () => {
  h = await startStandinRuns();
});
after(async () => h?.close());

const ASYNC = ['rollout.max_staleness=1', 'grpo.tis.enabled=true'];

/** Every episode of the run completed once, every trained sample went to exactly one train step, and
 *  the step records' data cursors follow each other. */
async function checkExactlyOnce(runId: string, steps: number): Promise<void> {
  const trains = h.trace.trains.filter((t) => t.samples.some((s) => s.includes(`/${runId}/`)));
  const perStep = new Map<number, number>();
  for (const t of trains) perStep.set(t.step, (perStep.get(t.step) ?? 0) + 1);
  assert.deepEqual(
    [...perStep.keys()].sort(),
    Array.from({ length: steps }, (_, i) => i),
  );
  const samples = trains.flatMap((t) => t.samples);
  assert.equal(new Set(samples).size, samples.length, 'no sample trained twice');
  const records = await readStepRecords(runDir(h.cfg, runId));
  assert.deepEqual(
    records.map((r) => r.step),
    Array.from({ length: steps }, (_, i) => i),
  );
  records.forEach((r, i) => {
    if (i > 0)
      assert.deepEqual(r.data_before, records[i - 1]!.data_after, `step ${r.step}'s cursor follows step ${i - 1}'s`);
    assert.equal(r.episodes.length, 4);
    for (const e of r.episodes)
      assert.equal(parseEpisodeId(e.episode_id).step, r.step, `step ${r.step} trains its own batch`);
  });
  const completed = new Map<string, number>();
  for await (const wf of h.client.workflow.list({
    query: `WorkflowType = 'episode' AND ExecutionStatus = 'Completed'`,
  }))
    if (wf.workflowId.startsWith(`episode/${runId}/`))
      completed.set(wf.workflowId, (completed.get(wf.workflowId) ?? 0) + 1);
  assert.ok(
    [...completed.values()].every((n) => n === 1),
    'no episode completed twice',
  );
  const trained = records.flatMap((r) => r.episodes.filter((e) => e.trained).map((e) => `episode/${e.episode_id}`));
  for (const id of trained) assert.equal(completed.get(id), 1, `${id} completed once`);
}

test('synchronous run: eval before and after, every sample trained once', { timeout: 120_000 }, async () => {
  await h.start(h.plan('sync', ['run.eval_interval=3', 'run.eval_at_start=true', 'run.eval_prompts=2']));
  const r = await h.result('sync');
  assert.equal(r.status, 'completed');
  assert.equal(r.steps_done, 3);
  const records = await readStepRecords(runDir(h.cfg, 'sync'));
  assert.equal(records[0]!.metrics['eval_start/reward'] !== undefined, true, 'the start-of-run eval is in step 0');
  assert.equal(records[2]!.metrics['eval/n'], 2);
  assert.equal(records[0]!.metrics['rollout/staleness_max'], undefined, 'no staleness metrics in synchronous mode');
  assert.deepEqual(
    records.map((x) => x.metrics['train/logprob_diff_alarm']),
    [0, 1, 1],
    'a train/rollout logprob |diff| above grpo.max_logprob_diff raises the alarm from the step it happens',
  );
  // Synchronous: every generate call of step s ran on weights s, and the sync waits for nothing.
  for (const g of h.trace.generates.filter((x) => x.episode_id.startsWith('sync/')))
    assert.equal(g.weight_version, parseEpisodeId(g.episode_id).step);
  assert.ok(
    h.trace.syncs.every((s) => s.pause_mode === 'wait'),
    'nothing in flight to keep',
  );
  await checkExactlyOnce('sync', 3);
  await recordHistory(h.client, trainingRunWorkflowId('sync'), 'training-run-sync-with-eval');
});

test('async window: the next batch runs while a step trains, at most one version stale, across continue-as-new', {
  timeout: 120_000,
}, async () => {
  h.latency.train_ms = 400;
  try {
    await h.start(h.plan('async', [...ASYNC, 'run.steps=4', 'rollout.concurrency=8']));
    const r = await h.result('async');
    assert.equal(r.status, 'completed');
    assert.equal(r.steps_done, 4);
    assert.deepEqual(r.state.window?.batches, [], 'nothing left in the window at the end');
  } finally {
    h.latency.train_ms = 50;
  }
  const trains = h.trace.trains.filter((t) => t.samples.some((s) => s.includes('/async/')));
  const gens = h.trace.generates.filter((g) => g.episode_id.startsWith('async/'));
  for (const g of gens) {
    const step = parseEpisodeId(g.episode_id).step;
    assert.ok(
      g.weight_version >= step - 1 && g.weight_version <= step,
      `${g.episode_id} generated by weights ${g.weight_version}: at most 1 version older than step ${step}'s`,
    );
  }
  const overlapped = trains.filter((t) =>
    gens.some((g) => parseEpisodeId(g.episode_id).step === t.step + 1 && g.start < t.end),
  );
  assert.ok(
    overlapped.length >= 2,
    `episodes of the next batch generated during train steps ${overlapped.map((t) => t.step)}`,
  );
  assert.ok(
    h.trace.syncs.filter((s) => s.weight_version > 0).some((s) => s.pause_mode === 'keep'),
    'the sync keeps requests in flight (rollout.sync_in_flight)',
  );
  const records = await readStepRecords(runDir(h.cfg, 'async'));
  assert.ok(records.every((rec) => rec.metrics['rollout/staleness_max']! <= 1));
  assert.ok(
    records.some((rec) => rec.metrics['rollout/staleness_max'] === 1),
    'some episodes were sampled by the weights before',
  );
  const runs: Array<{ runId: string; start: number }> = [];
  for await (const wf of h.client.workflow.list({ query: `WorkflowId = '${trainingRunWorkflowId('async')}'` }))
    runs.push({ runId: wf.runId, start: wf.startTime.getTime() });
  assert.ok(runs.length >= 4, `the window crossed continue-as-new (${runs.length} workflow runs)`);
  await checkExactlyOnce('async', 4);
  // A run from the middle of the chain: it inherits a window, receives reports, trains, continues as new.
  runs.sort((a, b) => a.start - b.start);
  await recordHistory(h.client, trainingRunWorkflowId('async'), 'training-run-async-window', runs[1]!.runId);
});

test('async window with run.deterministic: step s is sampled by the weights of step s − 1 exactly, still while step s − 1 trains', {
  timeout: 120_000,
}, async () => {
  h.latency.train_ms = 400;
  try {
    await h.start(h.plan('async-det', [...ASYNC, 'run.steps=4', 'rollout.concurrency=8', 'run.deterministic=true']));
    assert.equal((await h.result('async-det')).status, 'completed');
  } finally {
    h.latency.train_ms = 50;
  }
  const gens = h.trace.generates.filter((g) => g.episode_id.startsWith('async-det/'));
  for (const g of gens)
    assert.equal(g.weight_version, Math.max(0, parseEpisodeId(g.episode_id).step - 1), `${g.episode_id}'s weights`);
  const trains = h.trace.trains.filter((t) => t.samples.some((x) => x.includes('/async-det/')));
  const overlapped = trains.filter((t) =>
    gens.some((g) => parseEpisodeId(g.episode_id).step === t.step + 1 && g.start < t.end),
  );
  assert.ok(overlapped.length >= 2, `the next batch ran during train steps ${overlapped.map((t) => t.step)}`);
  await checkExactlyOnce('async-det', 4);
});

test('async window: pause now is refused without an event; pause, stop and continue lose and repeat nothing', {
  timeout: 120_000,
}, async () => {
  h.latency.generate_ms = 100;
  try {
    await h.start(h.plan('async-stop', [...ASYNC, 'run.steps=4', 'rollout.concurrency=8']));
    await waitForProgress(h.client, 'async-stop', (p) => p.step >= 1, 'step 1');
    const handle = h.client.workflow.getHandle(trainingRunWorkflowId('async-stop'));
    const updates = async () =>
      (await handle.fetchHistory()).events!.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes).length;
    const before = await updates();
    const refused = await controlRun(h.client, 'async-stop', 'pause-now');
    assert.equal(refused.accepted, false);
    assert.match(refused.message, /max_staleness/);
    assert.equal(await updates(), before, 'a refused update leaves no event');
    assert.equal((await controlRun(h.client, 'async-stop', 'pause')).accepted, true);
    await waitForProgress(h.client, 'async-stop', (p) => p.status === 'paused', 'paused');
    assert.equal((await controlRun(h.client, 'async-stop', 'resume')).accepted, true);
    assert.equal((await controlRun(h.client, 'async-stop', 'stop')).accepted, true);
    const stopped = (await handle.result()) as RunResult;
    assert.equal(stopped.status, 'stopped');
    assert.ok(stopped.state.window!.batches.length >= 1, 'the stopped run hands its window on');
    // Continue as `tempo-rl train --run-id` does: the episodes still out report to the new run or are looked up.
    await h.start({ ...stopped.state, paused: false, engines_synced: false });
    const done = await h.result('async-stop');
    assert.equal(done.status, 'completed');
    assert.equal(done.steps_done, 4);
  } finally {
    h.latency.generate_ms = 0;
  }
  await checkExactlyOnce('async-stop', 4);
});

test('async window: a batch whose episodes all failed is sampled again under new ids', {
  timeout: 120_000,
}, async () => {
  const script = h.script;
  h.script = (req, call) => {
    const id = parseEpisodeId(req.session_id);
    if (id.run_id === 'async-fail' && id.step === 1 && id.sample_index < 2)
      return { text: '', fail: new EngineRequestError('scripted: the engine rejects the request') };
    return script(req, call);
  };
  try {
    await h.start(h.plan('async-fail', [...ASYNC, 'run.steps=3']));
    const r = await h.result('async-fail');
    assert.equal(r.status, 'completed');
  } finally {
    h.script = script;
  }
  const records = await readStepRecords(runDir(h.cfg, 'async-fail'));
  assert.ok(
    records[1]!.episodes.every((e) => parseEpisodeId(e.episode_id).sample_index >= 2),
    'step 1 trains the redone episodes',
  );
  await checkExactlyOnce('async-fail', 3);
});

test("synchronous run: pause now cancels the step's episodes and redoes them after resume", {
  timeout: 120_000,
}, async () => {
  h.latency.generate_ms = 300;
  try {
    await h.start(h.plan('pause-now', ['run.steps=2']));
    await waitForProgress(
      h.client,
      'pause-now',
      (p) => p.phase === 'rollout' && p.step === 0 && p.episodes_total > 0,
      "step 0's episodes",
    );
    const ack = await controlRun(h.client, 'pause-now', 'pause-now');
    assert.equal(ack.accepted, true);
    assert.match(ack.message, /cancelled/);
    await waitForProgress(h.client, 'pause-now', (p) => p.status === 'paused', 'paused');
    assert.equal((await controlRun(h.client, 'pause-now', 'resume')).accepted, true);
    assert.equal(
      (await controlRun(h.client, 'pause-now', 'resume')).accepted,
      false,
      'resuming a running run is refused',
    );
    const r = await h.result('pause-now');
    assert.equal(r.status, 'completed');
  } finally {
    h.latency.generate_ms = 0;
  }
  await checkExactlyOnce('pause-now', 2);
});

test("synchronous run: pause now while the step's prompts are read starts no episode; the step runs after resume", {
  timeout: 120_000,
}, async () => {
  h.latency.prompts_ms = 1500;
  try {
    await h.start(h.plan('pause-prompts', ['run.steps=1']));
    // Step 0 is in its rollout phase, its prompts still being read: no episode has started.
    await waitForProgress(
      h.client,
      'pause-prompts',
      (p) => p.phase === 'rollout' && p.step === 0,
      'step 0 rolling out',
    );
    const ack = await controlRun(h.client, 'pause-prompts', 'pause-now');
    assert.match(ack.message, /cancelled/);
    await waitForProgress(h.client, 'pause-prompts', (p) => p.status === 'paused', 'paused');
    const ofRun = () => h.trace.generates.filter((g) => g.episode_id.startsWith('pause-prompts/'));
    assert.equal(ofRun().length, 0, 'no episode started before the resume');
    h.latency.prompts_ms = 0;
    assert.equal((await controlRun(h.client, 'pause-prompts', 'resume')).accepted, true);
    assert.equal((await h.result('pause-prompts')).status, 'completed');
    assert.ok(ofRun().length > 0);
  } finally {
    h.latency.prompts_ms = 0;
  }
  await checkExactlyOnce('pause-prompts', 1);
});

test("async window: a pause while the step's own batch is still being started lets that step finish", {
  timeout: 120_000,
}, async () => {
  h.latency.generate_ms = 300;
  try {
    // concurrency 2 < a batch of 4: step 0's last episodes start only after its first ones end.
    await h.start(h.plan('async-pause', [...ASYNC, 'run.steps=3', 'rollout.concurrency=2']));
    await waitForProgress(
      h.client,
      'async-pause',
      (p) => p.phase === 'rollout' && p.step === 0 && p.episodes_done < 2,
      "step 0's first episodes",
    );
    assert.equal((await controlRun(h.client, 'async-pause', 'pause')).accepted, true);
    const paused = await waitForProgress(
      h.client,
      'async-pause',
      (p) => p.status === 'paused',
      'paused after step 0',
      60_000,
    );
    assert.equal(paused.step, 1, 'step 0 finished before the pause');
    assert.equal((await controlRun(h.client, 'async-pause', 'resume')).accepted, true);
    assert.equal((await h.result('async-pause')).status, 'completed');
  } finally {
    h.latency.generate_ms = 0;
  }
  await checkExactlyOnce('async-pause', 3);
});

test("SFT: each step trains its records once; the next step's render runs ahead and crosses continue-as-new", {
  timeout: 120_000,
}, async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-sft-standins-'));
  const records = Array.from({ length: 6 }, (_, i) => ({
    id: `r${i}`,
    messages: [
      { role: 'user', content: `What is ${i} + ${i}?` },
      { role: 'assistant', content: `\\boxed{${2 * i}}` },
    ],
  }));
  writeFileSync(path.join(dir, 'records.jsonl'), records.map((r) => JSON.stringify(r)).join('\n'));
  await h.start(
    h.plan('sft', ['algorithm=sft', `sft.path=${path.join(dir, 'records.jsonl')}`, 'sft.batch_size=2', 'run.steps=3']),
  );
  const r = await h.result('sft');
  assert.equal(r.status, 'completed');
  const trains = h.trace.trains.filter((t) => t.samples.some((s) => s.includes('/sft/sft/')));
  assert.deepEqual(trains.map((t) => t.step).sort(), [0, 1, 2]);
  assert.deepEqual(
    trains.map((t) => t.samples.length),
    [2, 2, 2],
  );
  const runs: Array<{ runId: string; start: number }> = [];
  for await (const wf of h.client.workflow.list({ query: `WorkflowId = '${trainingRunWorkflowId('sft')}'` }))
    runs.push({ runId: wf.runId, start: wf.startTime.getTime() });
  assert.equal(runs.length, 3, 'one workflow run a step');
  runs.sort((a, b) => a.start - b.start);
  // The middle run took over a batch rendered ahead by the run before, and rendered the next one ahead.
  const history = await h.client.workflow.getHandle(trainingRunWorkflowId('sft'), runs[1]!.runId).fetchHistory();
  const renders = activityCalls(history)
    .filter((c) => c.type === 'renderSftBatch')
    .map((c) => (c.input as { step: number }).step);
  assert.deepEqual(renders, [2], 'step 1 came with the state; only step 2 rendered here');
  await recordHistory(h.client, trainingRunWorkflowId('sft'), 'training-run-sft-render-ahead', runs[1]!.runId);
});
