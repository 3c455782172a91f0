// The trainingRun workflow (docs/ARCHITECTURE.md "Training run"): per step, pick prompts → run
// episodes (child workflows, bounded concurrency) → optional zero-std filter → train (Python) →
// weight sync → record metrics → eval every k steps → continue-as-new with the run state.
// Deterministic: every I/O is an activity; prompt order is the pure lib/prompt-order.ts.
import {
  allHandlersFinished,
  CancellationScope,
  condition,
  continueAsNew,
  isCancellation,
  ParentClosePolicy,
  proxyActivities,
  startChild,
  patched,
  workflowInfo,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { RolloutActivities } from '../activities/index.js';
import type { SftBatchResult } from '../activities/sft.js';
import type { SyncWeightsInput, SyncWeightsOutput, TrainStepInput, TrainStepOutput } from '../lib/contract.js';
import { prefixed, scheduledLr, sftMetrics } from './sft-metrics.js';
import { selectPrompts, type DataCursor } from '../lib/prompt-order.js';
import { episode } from './episode.js';
import { episodeId, episodeStartOptions, type EpisodeInput, type EpisodeSummary } from './episode-messages.js';
import type { RunProgress, RunResult, RunState, RunStatus, SftAhead } from './training-run-messages.js';
import { RunControl } from './run-control.js';
import { emptyWindow, stalenessMetrics, WindowRunner } from './rollout-window.js';
import { evalMetricsOf, groupFilter, groupKey, rolloutMetrics } from './rollout-metrics.js';

// Changes of the commands a run issues, gated so that histories recorded before them still replay.
const EVAL_BY_WEIGHT_VERSION = 'eval-episodes-keyed-by-weight-version';
const CONTINUE_AS_NEW_SUGGESTED = 'continue-as-new-when-suggested';
const SFT_SYNC_BEFORE_EVAL_ONLY = 'sft-sync-before-eval-only';
const EMPTY_STEP_REDONE = 'empty-step-redone-not-committed';
const FINAL_SYNC_REACHES_ALL = 'final-sync-reaches-every-engine';
const SFT_RENDER_AHEAD = 'sft-render-ahead';
// The end of a run waits this long, at most, for engines the last sync missed.
const FINAL_SYNC_TRIES = 20;
const FINAL_SYNC_WAIT_MS = 15_000;

const acts = proxyActivities<RolloutActivities>({
  startToCloseTimeout: '10 minutes',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 20 },
});

interface TrainerActivities {
  train_step(input: TrainStepInput): Promise<TrainStepOutput>;
  sync_weights(input: SyncWeightsInput): Promise<SyncWeightsOutput>;
  log_metrics(input: { run_id: string; run_dir: string; step: number; metrics: Record<string, number> }): Promise<{ tensorboard: string; wandb: boolean }>;
}

function trainerActs(taskQueue: string) {
  return proxyActivities<TrainerActivities>({
    taskQueue,
    startToCloseTimeout: '2 hours',
    // A killed trainer is noticed within the heartbeat timeout; the retry resumes from the last
    // committed checkpoint, and a step already committed returns its recorded metrics. The trainer
    // heartbeats every second from a side thread through every phase (workers/trainer/heartbeat.py),
    // so a short timeout cuts no long load, save or reload.
    heartbeatTimeout: '10 seconds',
    // Which trainer errors no retry can fix is decided in one place: workers/trainer/activities.py
    // raises them as non-retryable ApplicationErrors.
    // Bounded: a trainer or engines that never come back end the run (failed; `tempo-rl train` of the
    // same run id continues it) instead of stalling it forever.
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 30 },
  });
}

export async function trainingRun(initial: RunState): Promise<RunResult> {
  const state: RunState = JSON.parse(JSON.stringify(initial)) as RunState;
  const plan = state.plan;
  const trainer = trainerActs(plan.trainer_task_queue);
  const staleness = plan.episode.max_staleness ?? 0;
  if (staleness > 0) state.window ??= emptyWindow(state.data);
  const window = staleness > 0 ? new WindowRunner(state, acts, () => state.paused || control.stopRequested) : null;
  // Before any await: buffered signals and updates are delivered as their handlers are set.
  const control = new RunControl(state, { asyncWindow: staleness > 0, onEpisodeDone: (s) => window?.onEpisodeDone(s) });
  const progress = control.progress;
  const setStatus = (s: RunStatus) => control.setStatus(s);
  // With episodes in flight (the async window) a sync keeps, aborts or waits for their requests.
  const w = plan.weights;
  const syncInput = (weight_version: number, checkpoint: string, engines: string[]): SyncWeightsInput => ({
    run_id: state.run_id, weight_version, checkpoint, engines, ...(window ? { pause_mode: plan.episode.sync_in_flight ?? 'keep' } : {}),
    ...(w ? { transport: w.transport, engine_dtype: w.engine_dtype, ipc_bucket_mb: w.ipc_bucket_mb, ...(w.colocated_sleep_level ? { wake_engines: true } : {}) } : {}),
  });

  const finish = async (final: RunStatus, reason?: string): Promise<RunResult> => {
    await window?.close();
    progress.phase = 'idle';
    setStatus(final);
    return { run_id: state.run_id, state: { ...state, paused: false }, status: final, steps_done: state.step, weight_version: state.weight_version, checkpoint: state.checkpoint, last_metrics: state.last_metrics, ...(reason ? { reason } : {}) };
  };

  if (!state.dataset) {
    progress.phase = 'dataset';
    state.dataset =
      plan.algorithm === 'sft'
        ? await acts.prepareSftDataset({ run_id: state.run_id, path: plan.sft_path!, dataset: plan.dataset, environment: plan.eval_episode.environment })
        : await acts.prepareDataset({ run_id: state.run_id, dataset: plan.dataset, environment: plan.episode.environment });
  }
  const dataset = state.dataset;
  if (!state.engines_synced) {
    // The engines may serve other weights (a new run after another, a resumed run, restarted engines).
    progress.phase = 'sync';
    await trainer.sync_weights(syncInput(state.weight_version, state.checkpoint ?? plan.model_path, await acts.listEngines()));
    state.engines_synced = true;
  }
  if (state.step === 0 && plan.eval_at_start && plan.eval_interval > 0 && dataset.eval_ref && !state.start_eval) {
    // The "before" of the run: the starting weights on the held-out split.
    progress.phase = 'eval';
    state.start_eval = prefixed(await runEval(state, state.weight_version, progress), 'eval', 'eval_start');
  }

  let stepsThisRun = 0;
  // The next SFT step's batch, rendering while this step trains.
  let sftAhead: { step: number; indices: number[]; batch: Promise<SftBatchResult> } | null = null;
  let emptyTries = 0; // this workflow run's (a continued run gets its own tries)
  while (state.step < plan.steps) {
    if (state.paused) {
      setStatus('paused');
      progress.phase = 'idle';
      await condition(() => !state.paused || control.stopRequested);
    }
    if (control.stopRequested) return finish('stopped');
    if (control.status !== 'running') setStatus('running');
    const stepStarted = Date.now();

    // 1. prompts and episodes (SFT: the step's records, rendered as samples)
    progress.phase = 'rollout';
    if (plan.algorithm === 'sft') {
      const pick = selectPrompts(dataset.train_size, plan.seed, state.data, plan.prompts_per_step);
      const batch = await sftBatch(state.step, pick.indices);
      if (state.step + 1 < plan.steps && plan.sft_render_ahead !== false && patched(SFT_RENDER_AHEAD)) {
        // The next step's records render while this one trains (the engines and the trainer are
        // different processes). Rendering is idempotent — a step's samples are named by run, step and
        // position — so a render no step takes (a stop, a continue-as-new) costs nothing but its time.
        const nextPick = selectPrompts(dataset.train_size, plan.seed, pick.next, plan.prompts_per_step);
        sftAhead = { step: state.step + 1, indices: nextPick.indices, batch: sftBatch(state.step + 1, nextPick.indices) };
        sftAhead.batch.catch(() => undefined); // its failure is the next step's to report
      }
      await trainAndRecord(batch.samples.map((b) => ({ ref: b.sample_ref, reward: 0, group_id: b.record_id })), sftMetrics(batch),
        [...batch.samples.map((b) => ({ episode_id: b.id, trained: true })), ...batch.skipped.map((b) => ({ episode_id: b.id, trained: false }))], pick.next, stepStarted);
      if (control.stopRequested) return finish('stopped');
      await maybeContinueAsNew();
      continue;
    }
    const rolled = window ? await asyncBatch(window) : await syncBatch();
    if (!rolled) continue; // paused mid-step: redo this step's episodes after resume
    const { summaries, dataAfter, redo } = rolled;

    // 2. group filter, then train, sync, eval, record
    const groups = groupFilter(summaries, plan.zero_std_filter);
    if (summaries.length > 0 && groups.failed === summaries.length && patched(EMPTY_STEP_REDONE)) {
      // Every episode failed (engines down, workers gone): training on nothing would move the data
      // cursor past these prompts for good. Redo the step after a wait; past the limit, stop the run.
      state.empty_redos = (state.empty_redos ?? 0) + 1;
      redo();
      const tries = ++emptyTries;
      if (tries > (plan.empty_step_retries ?? 0)) {
        const why = summaries.find((e) => e.truncated_reason)?.truncated_reason ?? 'unknown';
        return finish('failed', `step ${state.step}: all ${summaries.length} episodes failed in each of ${tries} tries (first reason: ${why});` +
          ' nothing was trained and the data cursor did not move — fix the engines or workers, then continue the run');
      }
      progress.phase = 'idle';
      await condition(() => control.stopRequested, (plan.empty_step_wait_s ?? 30) * tries * 1000);
      if (control.stopRequested) return finish('stopped');
      continue;
    }
    state.empty_redos = 0;
    emptyTries = 0;
    await trainAndRecord(
      groups.kept.map((e) => ({ ref: e.sample_ref, reward: e.reward, group_id: groupKey(e) })),
      { ...rolloutMetrics(summaries, groups), ...(window ? stalenessMetrics(summaries, state.weight_version) : {}) },
      summaries.map((e) => ({ episode_id: e.episode_id, trained: groups.kept.includes(e) })),
      dataAfter, stepStarted,
    );
    if (control.stopRequested) return finish('stopped');
    await maybeContinueAsNew();
  }
  if (state.engines_behind?.length && patched(FINAL_SYNC_REACHES_ALL)) {
    // The run's result is "every engine serves the final weights": an engine the last sync missed
    // (dead then, restarted since) gets them now.
    progress.phase = 'sync';
    for (let i = 0; i < FINAL_SYNC_TRIES && state.engines_behind.length && !control.stopRequested; i++) {
      await condition(() => control.stopRequested, FINAL_SYNC_WAIT_MS);
      const out = await trainer.sync_weights(syncInput(state.weight_version, state.checkpoint ?? plan.model_path, await acts.listEngines()));
      state.engines_behind = out.engines.filter((e) => !e.ok).map((e) => e.url);
    }
    if (state.engines_behind.length)
      return finish('completed', `the final weights (version ${state.weight_version}) did not reach ${state.engines_behind.join(', ')} (labelled unusable there); the next run's start syncs them`);
  }
  return finish('completed');

  /** A step's SFT records as samples: rendered ahead while the step before trained, or now. */
  function sftBatch(step: number, indices: number[]): Promise<SftBatchResult> {
    // Rendered in this execution, or carried into it with the state (only ever one of the two).
    const carried = state.sft_next;
    const ahead = sftAhead ?? (carried ? { ...carried, batch: Promise.resolve(carried.batch) } : null);
    state.sft_next = null;
    sftAhead = null;
    if (ahead && ahead.step === step && ahead.indices.join() === indices.join()) return ahead.batch;
    return acts.renderSftBatch({ run_id: state.run_id, step, dataset_ref: state.dataset!.train_ref, indices, limits: plan.episode, blob_store: plan.blob_store, blob_root: plan.blob_root });
  }

  interface Rolled {
    summaries: EpisodeSummary[];
    dataAfter: DataCursor;
    /** Every episode failed: sample the same prompts again under new episode ids. */
    redo: () => void;
  }

  /** The step's episodes, sampled now by the current weights; null: paused now (cancelled). */
  async function syncBatch(): Promise<Rolled | null> {
    const pick = selectPrompts(dataset.train_size, plan.seed, state.data, plan.prompts_per_step);
    const prompts = await acts.episodePrompts({ dataset_ref: dataset.train_ref, indices: pick.indices, multi_turn: plan.episode.multi_turn, system_prompt: plan.system_prompt, environment: plan.episode.environment });
    const inputs: EpisodeInput[] = [];
    // A redone empty step samples the same prompts again under new episode ids (the failed episodes
    // completed, and a completed episode is never run twice): sample indices past the earlier tries'.
    const firstSample = (state.empty_redos ?? 0) * plan.n_samples_per_prompt;
    prompts.forEach((p, promptIndex) => {
      for (let s = firstSample; s < firstSample + plan.n_samples_per_prompt; s++)
        inputs.push({ run_id: state.run_id, step: state.step, prompt_index: promptIndex, sample_index: s, prompt: p.prompt, label: p.label, ...(p.env_state !== undefined ? { env_state: p.env_state } : {}), settings: plan.episode, weight_version: state.weight_version, blob_store: plan.blob_store, blob_root: plan.blob_root });
    });
    control.pauseNow = false;
    const summaries = await runEpisodes(inputs, plan.concurrency, (scope) => (control.episodeScope = scope), progress);
    control.episodeScope = null;
    return control.pauseNow ? null : { summaries, dataAfter: pick.next, redo: () => undefined };
  }

  /** The step's batch from the window, once complete; the window is filled up to step + k first, so
   *  the next k steps' episodes run while this one trains. */
  async function asyncBatch(w: WindowRunner): Promise<Rolled> {
    await w.fill(state.step + staleness);
    w.start();
    await w.waitFor(state.step, (done, total) => Object.assign(progress, { episodes_done: done, episodes_total: total }));
    const { batch, summaries } = w.take(state.step);
    return { summaries, dataAfter: batch.data_after, redo: () => w.redo(batch) };
  }

  /** Train step, weight sync, eval every k steps, the step record; advances the state. */
  async function trainAndRecord(
    samples: TrainStepInput['samples'], stepMetrics: Record<string, number>, episodes: Array<{ episode_id: string; trained: boolean }>,
    dataAfter: DataCursor, stepStarted: number,
  ): Promise<void> {
    const rolloutSeconds = (Date.now() - stepStarted) / 1000;
    progress.phase = 'train';
    const trainStarted = Date.now();
    // Engines that share the trainer's GPUs sleep while it trains (the sync after it wakes them).
    const sleeping = w?.colocated_sleep_level ? { sleep_engines: await acts.listEngines(), engine_sleep_level: w.colocated_sleep_level } : {};
    const trained = await trainer.train_step({
      ...sleeping,
      run_id: state.run_id, step: state.step, run_dir: plan.run_dir, blob_store: plan.blob_store, blob_root: plan.blob_root, model_path: plan.model_path, samples,
      // The trainer restricts its softmax to the tokens the engine sampled among (from the plan, so older plans work too).
      hyper: { ...plan.hyper, lr: scheduledLr(plan.hyper.lr, plan.lr_schedule, state.step, plan.steps, plan.lr_warmup_steps), ...(plan.episode.allowed_token_ids?.length ? { allowed_token_ids: plan.episode.allowed_token_ids } : {}) }, data_cursor: dataAfter,
      ...(plan.algorithm === 'sft' ? { algorithm: 'sft' as const } : {}),
      ...(plan.keep_checkpoints ? { keep_checkpoints: plan.keep_checkpoints } : {}),
      ...(plan.keep_checkpoint_every ? { keep_checkpoint_every: plan.keep_checkpoint_every } : {}),
      // The last step is always full: the run's result is a model directory (exported, evaluated, resumed).
      ...(plan.checkpoint_interval ? { checkpoint_interval: plan.checkpoint_interval, full_checkpoint: state.step === plan.steps - 1 } : {}),
    });
    const trainSeconds = (Date.now() - trainStarted) / 1000;
    const evalNow = plan.eval_interval > 0 && !!state.dataset!.eval_ref && (state.step + 1) % plan.eval_interval === 0;
    progress.phase = 'sync';
    const syncStarted = Date.now();
    let syncMetrics: Record<string, number> = {};
    // SFT samples nothing from the engines between its steps: they need its weights only for an eval
    // (so for SFT, engines_synced means synced once in this run, and every eval syncs first).
    if (plan.algorithm !== 'sft' || evalNow || !patched(SFT_SYNC_BEFORE_EVAL_ONLY)) {
      const engines = await acts.listEngines();
      const synced = await trainer.sync_weights(syncInput(trained.weight_version, trained.checkpoint, engines));
      // Labelled unusable by the sync (their tokens are retried elsewhere); the next sync tries them again.
      state.engines_behind = synced.engines.filter((e) => !e.ok).map((e) => e.url);
      syncMetrics = syncTimings(synced.timings ?? {});
    }
    const syncSeconds = (Date.now() - syncStarted) / 1000;

    // eval every k steps (after the update, on the held-out split)
    let evalMetrics: Record<string, number> = {};
    if (evalNow) {
      progress.phase = 'eval';
      evalMetrics = await runEval(state, trained.weight_version, progress);
    }

    progress.phase = 'record';
    const metrics: Record<string, number> = {
      ...(state.step === 0 ? state.start_eval ?? {} : {}),
      ...stepMetrics,
      ...trained.metrics,
      ...evalMetrics,
      'perf/rollout_time': rolloutSeconds,
      'perf/train_time': trainSeconds,
      'perf/weight_sync_time': syncSeconds,
      ...syncMetrics,
      'sync/engines_failed': state.engines_behind?.length ?? 0,
      'perf/step_time': (Date.now() - stepStarted) / 1000,
    };
    metrics['perf/rollout_tokens_per_second'] = (metrics['rollout/total_response_tokens'] ?? 0) / Math.max(rolloutSeconds, 1e-9);
    await acts.recordStep({ run_id: state.run_id, step: state.step, metrics, weight_version: trained.weight_version, episodes, data_before: state.data, data_after: dataAfter });
    await trainer.log_metrics({ run_id: state.run_id, run_dir: plan.run_dir, step: state.step, metrics });
    state.start_eval = null;
    state.step += 1;
    state.data = dataAfter;
    state.weight_version = trained.weight_version;
    state.checkpoint = trained.checkpoint;
    state.last_metrics = metrics;
    progress.step = state.step;
    progress.weight_version = state.weight_version;
    progress.metrics = metrics;
    setStatus(state.paused ? 'paused' : control.stopRequested ? 'stopping' : 'running');
    stepsThisRun += 1;
  }

  async function maybeContinueAsNew(): Promise<void> {
    // Temporal suggests it before the history gets too large (many episodes per step).
    if (state.step < plan.steps && (stepsThisRun >= plan.steps_per_workflow_run || (patched(CONTINUE_AS_NEW_SUGGESTED) && workflowInfo().continueAsNewSuggested))) {
      await window?.close(); // no episode start half-issued: the next run starts what is left
      // The step rendering ahead goes to the next run with the state (failed: the next run renders it).
      const ahead = sftAhead;
      if (ahead) state.sft_next = await ahead.batch.then((batch): SftAhead => ({ step: ahead.step, indices: ahead.indices, batch }), () => null);
      await condition(allHandlersFinished);
      await continueAsNew<typeof trainingRun>(state);
    }
  }

  async function runEval(st: RunState, weightVersion: number, prog: RunProgress): Promise<Record<string, number>> {
    const d = st.dataset!;
    const n = Math.min(plan.eval_prompts, d.eval_size);
    const indices = Array.from({ length: n }, (_, i) => i);
    const prompts = await acts.episodePrompts({ dataset_ref: d.eval_ref!, indices, multi_turn: plan.eval_episode.multi_turn, system_prompt: plan.system_prompt, environment: plan.eval_episode.environment });
    // Keyed by the weight version evaluated: the start-of-run eval and each later one are distinct episodes.
    const evalInputs = prompts.map((p, i) => ({
      run_id: `${st.run_id}-eval`, step: patched(EVAL_BY_WEIGHT_VERSION) ? weightVersion : st.step, prompt_index: i, sample_index: 0, prompt: p.prompt, label: p.label, ...(p.env_state !== undefined ? { env_state: p.env_state } : {}),
      settings: plan.eval_episode, weight_version: weightVersion, blob_store: plan.blob_store, blob_root: plan.blob_root,
    }));
    const out = await runEpisodes(evalInputs, plan.concurrency, () => undefined, prog);
    return evalMetricsOf(out);
  }
}

/** Runs episodes as child workflows, at most `limit` at once, in a cancellable scope. */
async function runEpisodes(
  inputs: EpisodeInput[],
  limit: number,
  onScope: (scope: CancellationScope) => void,
  progress: RunProgress,
): Promise<EpisodeSummary[]> {
  progress.episodes_total = inputs.length;
  progress.episodes_done = 0;
  const results: EpisodeSummary[] = new Array(inputs.length);
  const scope = new CancellationScope();
  onScope(scope);
  try {
    await scope.run(async () => {
      let next = 0;
      const worker = async () => {
        while (next < inputs.length) {
          const i = next++;
          results[i] = await runOneEpisode(inputs[i]!);
          progress.episodes_done += 1;
        }
      };
      await Promise.all(Array.from({ length: Math.min(limit, inputs.length) }, worker));
    });
  } catch (err) {
    // Only our own scope's cancellation (pause now) is swallowed; cancelling the run itself is not.
    if (isCancellation(err) && !CancellationScope.current().consideredCancelled) return [];
    throw err;
  }
  return results;
}

async function runOneEpisode(input: EpisodeInput): Promise<EpisodeSummary> {
  const id = episodeId(input);
  try {
    // A completed episode is never run again: a retried or resumed step finds it instead.
    const child = await startChild(episode, { ...episodeStartOptions(id), args: [input], parentClosePolicy: ParentClosePolicy.TERMINATE });
    return await child.result();
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) {
      const done = await acts.loadEpisodeSummary({ episode_id: id, weight_version: input.weight_version, blob_store: input.blob_store, blob_root: input.blob_root });
      if (done) return done;
    }
    if (isCancellation(err)) throw err;
    const message = (err as Error)?.message ?? String(err);
    return {
      episode_id: id, sample_ref: '', reward: 0, status: 'FAILED', truncated_reason: `episode workflow failed: ${message}`,
      response_len: 0, turns: 0, weight_version: input.weight_version,
    };
  }
}

/** The weight sync's phases as step metrics (sync/*; sync/seconds_per_gb: end to end, pause to resume). */
function syncTimings(t: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(t)) out[`sync/${k}`] = v;
  if ((t.transfer_bytes ?? 0) > 0 && t.seconds !== undefined) out['sync/seconds_per_gb'] = t.seconds / (t.transfer_bytes! / 1e9);
  return out;
}
