// SFT through the durable run machinery (algorithm: sft), against the real server, engine and trainer:
// multi-turn tool transcripts become samples with the rollout token layout, the masked NLL falls, and
// a trainer SIGKILLed mid-step resumes with every step trained exactly once.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { Sample } from '../../lib/contract.js';
import { loadDataset } from '../../lib/data/load.js';
import { writeSftRecords } from '../../lib/data/sft.js';
import { toolTranscripts } from '../../lib/data/transcripts.js';
import { stateLayout } from '../../stores/layout.js';
import { runHandle, startOrContinueRun } from '../../client/run-client.js';
import { checkInvariants } from '../../lib/trajectory.js';
import { readStepRecords } from '../../activities/run.js';
import { type RunResult, trainingRunWorkflowId } from '../../protocol/training-run.js';
import { recordHistory } from '../../testing/history-fixtures.js';
import { startRunFixture, waitForProgress } from '../../testing/run.js';

const STEPS = 3;
const transcripts = path.join(mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-sft-')), 'transcripts.jsonl');
const fx = await startRunFixture([
  'algorithm=sft',
  `sft.path=${transcripts}`,
  'sft.batch_size=4',
  'sft.lr=5e-3',
  `run.steps=${STEPS}`,
  'dataset.synthetic_task=angle_facts',
  'dataset.synthetic_size=8',
  'rollout.max_turns=2',
  'rollout.max_response_len=128',
]);
after(() => fx.close());

test('an SFT run on tool transcripts: rollout token layout, falling NLL, exactly once across a trainer SIGKILL', {
  timeout: 900_000,
}, async () => {
  const store = new LocalBlobStore(stateLayout(fx.cfg.state_dir).blobs);
  const { rows } = await loadDataset(fx.cfg.dataset, 'train', store);
  const records = toolTranscripts(rows, store, { max_turns: 2, first_correct: 0, seed: 1 });
  assert.ok(
    records.every((r) => r.messages.filter((m) => m.role === 'assistant').length === 2),
    'wrong-then-right (or wrong twice) transcripts',
  );
  await writeSftRecords(records, transcripts);

  const runId = 'sft-crash';
  await startOrContinueRun(fx.client, fx.cfg, runId);
  const atKill = await waitForProgress(
    fx.client,
    runId,
    (p) => p.phase === 'train' && p.step === 1,
    'the second SFT step in training',
    600_000,
  );
  await fx.killTrainer();
  const runDir = path.join(fx.cfg.state_dir, 'runs', runId);
  assert.equal(
    existsSync(path.join(runDir, 'checkpoints', `step-${String(atKill.step).padStart(6, '0')}`, 'meta.json')),
    false,
    'killed before the commit',
  );
  const result = (await runHandle(fx.client, runId).result()) as RunResult;
  assert.equal(result.status, 'completed');
  assert.equal(result.steps_done, STEPS);

  const ckpts = readdirSync(path.join(runDir, 'checkpoints'))
    .filter((n) => /^step-\d+$/.test(n))
    .sort();
  assert.equal(ckpts.length, STEPS);
  const consumed: string[] = [];
  for (const c of ckpts) {
    const meta = JSON.parse(readFileSync(path.join(runDir, 'checkpoints', c, 'meta.json'), 'utf8'));
    assert.equal(meta.optimizer_steps, meta.step + 1, `one optimizer step per SFT step (${c})`);
    assert.equal(meta.sample_refs.length, 4);
    consumed.push(...meta.sample_refs);
  }
  assert.equal(new Set(consumed).size, consumed.length, 'every sample consumed by exactly one step');

  const steps = await readStepRecords(runDir);
  assert.deepEqual(
    steps.map((s) => s.step),
    [0, 1, 2],
  );
  const sources = await Promise.all(
    consumed.slice(0, 8).map(async (ref) => Sample.parse(await store.getJson(ref)).group_id),
  );
  assert.equal(new Set(sources).size, 8, 'the first epoch (two steps of four) consumes every record once');
  // SFT syncs the engines only before an eval (none here): the last workflow execution (continued as
  // new after each step, with the engines already synced once) schedules no weight sync.
  const history = await fx.client.workflow.getHandle(trainingRunWorkflowId(runId)).fetchHistory();
  const scheduled = (history.events ?? [])
    .map((e) => e.activityTaskScheduledEventAttributes?.activityType?.name)
    .filter(Boolean);
  assert.ok(
    scheduled.includes('train_step') && !scheduled.includes('sync_weights'),
    `activities of the last execution: ${scheduled.join(', ')}`,
  );
  // Each step's records were rendered once, the next step's while this one trained (carried across
  // the continue-as-new between them): a step after the first starts training without a render.
  const renders: Array<{ step: number; execution: number; beforeTrainDone: boolean }> = [];
  const listed: Array<{ runId: string; start: number }> = [];
  for await (const wf of fx.client.workflow.list({ query: `WorkflowId = '${trainingRunWorkflowId(runId)}'` }))
    listed.push({ runId: wf.runId, start: wf.startTime.getTime() });
  const executions = listed.sort((a, b) => a.start - b.start).map((e) => e.runId);
  assert.equal(executions.length, STEPS, 'one workflow execution per step (continued as new after each)');
  // The middle one (the trainer killed in it) receives its batch with the state and renders the next.
  await recordHistory(fx.client, trainingRunWorkflowId(runId), 'training-run-sft', executions[1]);
  for (const [execution, runIdOf] of executions.entries()) {
    const events =
      (await fx.client.workflow.getHandle(trainingRunWorkflowId(runId), runIdOf).fetchHistory()).events ?? [];
    const trainIds = new Set(
      events
        .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'train_step')
        .map((e) => String(e.eventId)),
    );
    const trainCompleted = events.findIndex((e) =>
      trainIds.has(String(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? '')),
    );
    events.forEach((e, i) => {
      const a = e.activityTaskScheduledEventAttributes;
      if (a?.activityType?.name !== 'renderSftBatch') return;
      const input = JSON.parse(Buffer.from(a.input!.payloads![0]!.data!).toString()) as { step: number };
      renders.push({ step: input.step, execution, beforeTrainDone: trainCompleted >= 0 && i < trainCompleted });
    });
  }
  assert.deepEqual(
    renders.map((r) => r.step).sort(),
    [0, 1, 2],
    `each step's records rendered once: ${JSON.stringify(renders)}`,
  );
  for (const r of renders.filter((x) => x.step > 0))
    assert.ok(
      r.execution === r.step - 1 && r.beforeTrainDone,
      `step ${r.step}'s records rendered while step ${r.step - 1} trained, in its execution: ${JSON.stringify(renders)}`,
    );

  const nll = steps.map((s) => s.metrics['sft/nll']!);
  assert.ok(nll[2]! < nll[0]!, `the NLL falls: ${nll.join(' → ')}`);

  // The samples have an episode's layout: tool-call turns (mask 1), synthetic EOS + observation (mask 0).
  for (const ref of consumed) {
    const s = Sample.parse(await store.getJson(ref));
    assert.ok(checkInvariants(s, fx.cfg.rollout.max_response_len).ok);
    assert.equal(s.turns.length, 2);
    assert.ok(s.turns[0]!.observation_tokens > 0, 'an observation after the first turn');
    const masked = s.loss_mask.filter((m) => m === 0).length;
    assert.equal(
      masked,
      s.turns[0]!.observation_tokens + 2,
      'mask 0 = the observation + one synthetic EOS per tool-call turn',
    );
    assert.ok(s.images.length === 1 && s.prompt_ids.includes(151655), 'the image is in the prompt, as in a rollout');
  }
});
