// A training run's control state and its message handlers in one unit (after Temporal's
// safe-message-handlers sample): status, pause / resume / stop updates, the progress query and the
// episodes' reports. A refused update is refused by its validator, so it leaves no event in the history.
import { ApplicationFailure, CancellationScope, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import { episodeDoneSignal, type EpisodeSummary } from './episode-messages.js';
import { pauseUpdate, progressQuery, REFUSED, resumeUpdate, stopUpdate, type Ack, type RunProgress, type RunState, type RunStatus, STATUS_ATTR, STEP_ATTR } from './training-run-messages.js';

export class RunControl {
  status: RunStatus;
  stopRequested = false;
  /** Set by "pause now": the current step's episodes were cancelled and the step is redone. */
  pauseNow = false;
  /** The scope of the synchronous step's episodes (cancelled by "pause now"). */
  episodeScope: CancellationScope | null = null;
  readonly progress: RunProgress;

  constructor(
    private readonly state: RunState,
    opts: { asyncWindow: boolean; onEpisodeDone: (s: EpisodeSummary) => void },
  ) {
    this.status = state.paused ? 'paused' : 'running';
    this.progress = {
      run_id: state.run_id, status: this.status, step: state.step, steps_total: state.plan.steps, phase: 'idle',
      episodes_done: 0, episodes_total: 0, weight_version: state.weight_version, metrics: state.last_metrics,
    };
    this.setStatus(this.status);
    const refuse = (message: string) => {
      throw ApplicationFailure.create({ type: REFUSED, message, nonRetryable: true });
    };
    setHandler(pauseUpdate, ({ mode }) => {
      if (state.paused || this.status === 'pausing') return this.ack(true, 'already paused or pausing');
      state.paused = true;
      if (mode === 'now' && this.episodeScope) {
        this.pauseNow = true;
        this.episodeScope.cancel();
      }
      this.setStatus(this.progress.phase === 'idle' ? 'paused' : 'pausing');
      return this.ack(true, mode === 'now' && this.pauseNow ? 'in-flight episodes cancelled; the step is redone on resume' : 'pausing after the current step');
    }, {
      validator: ({ mode }) => {
        if (this.stopRequested) refuse('the run is stopping');
        if (mode === 'now' && opts.asyncWindow)
          refuse('pause now is not offered with rollout.max_staleness > 0 (the window\'s episodes belong to several steps): pause after the step lets them finish');
      },
    });
    setHandler(resumeUpdate, () => {
      state.paused = false;
      this.setStatus('running');
      return this.ack(true, 'resumed');
    }, { validator: () => { if (!state.paused) refuse('not paused'); } });
    setHandler(stopUpdate, () => {
      this.stopRequested = true;
      if (this.status !== 'paused') this.setStatus('stopping');
      return this.ack(true, 'stopping after the current step');
    });
    setHandler(progressQuery, () => this.progress);
    setHandler(episodeDoneSignal, opts.onEpisodeDone);
  }

  setStatus(s: RunStatus): void {
    this.status = s;
    this.progress.status = s;
    upsertSearchAttributes([{ key: STATUS_ATTR, value: s }, { key: STEP_ATTR, value: this.state.step }]);
  }

  private ack(accepted: boolean, message: string): Ack {
    return { accepted, status: this.status, message };
  }
}
