// A training run's state and its message handlers in one class (after Temporal's
// safe-message-handlers sample, https://github.com/temporalio/samples-typescript/tree/main/message-passing/safe-message-handlers:
// the workflow's state lives in one object whose constructor sets every handler, before any await).
// Status, the pause / resume / stop updates, the progress query and the async window's episode
// reports. A refused update is refused by its validator, so it leaves no event in the history.
import { ApplicationFailure, type CancellationScope, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import type { SyncWeightsInput } from '../lib/contract.js';
import { episodeDoneSignal } from '../protocol/episode.js';
import {
  pauseUpdate,
  progressQuery,
  REFUSED,
  resumeUpdate,
  stopUpdate,
  STATUS_ATTR,
  STEP_ATTR,
  type Ack,
  type RunPlan,
  type RunProgress,
  type RunResult,
  type RunState,
  type RunStatus,
} from '../protocol/training-run.js';
import { emptyWindow, recordEpisodeDone } from './rollout-window.js';

export class TrainingRun {
  readonly state: RunState;
  readonly plan: RunPlan;
  readonly progress: RunProgress;
  /** rollout.max_staleness: the steps dispatched ahead of the one training (0: synchronous). */
  readonly staleness: number;
  status: RunStatus;
  stopRequested = false;
  /** The scope of the synchronous step's episodes (cancelled by "pause now": the step is redone). */
  episodeScope: CancellationScope | null = null;
  /** Steps trained by this workflow run (a continued run counts its own). */
  stepsThisRun = 0;

  constructor(initial: RunState) {
    this.state = JSON.parse(JSON.stringify(initial)) as RunState;
    this.plan = this.state.plan;
    this.staleness = this.plan.episode.max_staleness ?? 0;
    if (this.staleness > 0) this.state.window ??= emptyWindow(this.state.data);
    this.status = this.state.paused ? 'paused' : 'running';
    this.progress = {
      run_id: this.state.run_id,
      status: this.status,
      step: this.state.step,
      steps_total: this.plan.steps,
      phase: 'idle',
      episodes_done: 0,
      episodes_total: 0,
      weight_version: this.state.weight_version,
      metrics: this.state.last_metrics,
    };
    this.setStatus(this.status);
    // Before any await: buffered signals and updates are delivered as their handlers are set.
    this.setHandlers();
  }

  private setHandlers(): void {
    const state = this.state;
    const refuse = (message: string) => {
      throw ApplicationFailure.create({ type: REFUSED, message, nonRetryable: true });
    };
    setHandler(
      pauseUpdate,
      ({ mode }) => {
        if (state.paused || this.status === 'pausing') return this.ack('already paused or pausing');
        state.paused = true;
        const cancelled = mode === 'now' ? this.episodeScope : null;
        cancelled?.cancel();
        this.setStatus(this.progress.phase === 'idle' ? 'paused' : 'pausing');
        return this.ack(
          cancelled ? 'in-flight episodes cancelled; the step is redone on resume' : 'pausing after the current step',
        );
      },
      {
        validator: ({ mode }) => {
          if (this.stopRequested) refuse('the run is stopping');
          if (mode === 'now' && this.staleness > 0)
            refuse(
              "pause now is not offered with rollout.max_staleness > 0 (the window's episodes belong to several steps): pause after the step lets them finish",
            );
        },
      },
    );
    setHandler(
      resumeUpdate,
      () => {
        state.paused = false;
        this.setStatus('running');
        return this.ack('resumed');
      },
      {
        validator: () => {
          if (!state.paused) refuse('not paused');
        },
      },
    );
    setHandler(stopUpdate, () => {
      this.stopRequested = true;
      if (this.status !== 'paused') this.setStatus('stopping');
      return this.ack('stopping after the current step');
    });
    setHandler(progressQuery, () => this.progress);
    setHandler(episodeDoneSignal, (s) => recordEpisodeDone(state.window, s));
  }

  setStatus(s: RunStatus): void {
    this.status = s;
    this.progress.status = s;
    upsertSearchAttributes([
      { key: STATUS_ATTR, value: s },
      { key: STEP_ATTR, value: this.state.step },
    ]);
  }

  /** A weight sync's input; with episodes in flight (the async window) it keeps, aborts or waits for
   *  their requests (rollout.sync_in_flight); a synchronous run has none in flight: wait. */
  syncInput(weight_version: number, checkpoint: string, engines: string[]): SyncWeightsInput {
    const w = this.plan.weights;
    return {
      run_id: this.state.run_id,
      weight_version,
      checkpoint,
      engines,
      pause_mode: this.staleness > 0 ? (this.plan.episode.sync_in_flight ?? 'keep') : 'wait',
      transport: w.transport,
      engine_dtype: w.engine_dtype,
      ipc_bucket_mb: w.ipc_bucket_mb,
      ipc_load: w.ipc_load,
      wake_engines: w.colocated_sleep_level !== undefined,
    };
  }

  /** The run's result, ending in `final` (the state is the one to continue from, unpaused). */
  result(final: RunStatus, reason?: string): RunResult {
    const state = this.state;
    this.progress.phase = 'idle';
    this.setStatus(final);
    return {
      run_id: state.run_id,
      state: { ...state, paused: false },
      status: final,
      steps_done: state.step,
      weight_version: state.weight_version,
      checkpoint: state.checkpoint,
      last_metrics: state.last_metrics,
      ...(reason ? { reason } : {}),
    };
  }

  private ack(message: string): Ack {
    return { accepted: true, status: this.status, message };
  }
}
