// The async window of a training run (rollout.max_staleness = k > 0; docs/ARCHITECTURE.md "Async
// window"). The batches of steps s..s+k are dispatched while step s trains: their episodes run as
// abandoned child workflows that report to the run by workflow id (episodeDoneSignal), so they outlive
// continue-as-new, and the window (batches, started and finished episodes, the dispatched cursor)
// travels in the run state. A step trains on its own batch only, once every group of it is complete.
// Workflow code: deterministic, all I/O through activities.
import { condition, ParentClosePolicy, startChild, workflowInfo } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import { selectPrompts, type DataCursor } from '../lib/prompt-order.js';
import { episode } from './episode.js';
import type { RolloutActivities } from '../protocol/activities.js';
import { episodeId, episodeStartOptions, type EpisodeInput, type EpisodeSummary } from '../protocol/episode.js';
import type { RolloutWindow, RunPlan, RunState, WindowBatch } from '../protocol/training-run.js';

export type WindowActivities = Pick<RolloutActivities, 'episodePrompts' | 'episodeOutcomes'>;

/** While waiting for a batch, episodes that ended unheard (ended from outside, or before this run
 *  existed) are looked up this often. */
const RECONCILE_MS = 60_000;

export function emptyWindow(trained: DataCursor): RolloutWindow {
  return { dispatched: trained, batches: [], started: {}, finished: {} };
}

export function batchEpisodeIds(plan: RunPlan, runId: string, b: WindowBatch): string[] {
  return b.prompts.flatMap((_, p) =>
    Array.from({ length: plan.n_samples_per_prompt }, (_, i) =>
      episodeId({ run_id: runId, step: b.step, prompt_index: p, sample_index: b.first_sample + i }),
    ),
  );
}

/** An episode's report (the run's episodeDoneSignal handler): kept when the window started it. */
export function recordEpisodeDone(w: RolloutWindow | undefined, s: EpisodeSummary): void {
  if (w && w.started[s.episode_id] !== undefined && !w.finished[s.episode_id]) w.finished[s.episode_id] = s;
}

export class WindowRunner {
  private closing = false;
  /** Episodes that ended while no run of this workflow listened are looked up once per workflow run. */
  private reconciled = false;
  /** The step whose batch waitFor is waiting for (null: none). */
  private waitingFor: number | null = null;
  private pump: Promise<void> | null = null;
  /** drain() is waiting: every episode the current weights may start is started, paused or not. */
  private draining = false;

  constructor(
    private readonly state: RunState,
    private readonly acts: WindowActivities,
    /** Still no new episodes (a pause): those in flight go on. */
    private readonly holding: () => boolean,
  ) {}

  get window(): RolloutWindow {
    return this.state.window!;
  }

  /** Dispatch batches until the window reaches `lastStep` (bounded by the run's last step). */
  async fill(lastStep: number): Promise<void> {
    const { plan } = this.state;
    const w = this.window;
    let next = w.batches.length ? w.batches[w.batches.length - 1]!.step + 1 : this.state.step;
    for (; next <= Math.min(lastStep, plan.steps - 1); next++) {
      const { train_size, train_strata } = this.state.dataset!;
      const pick = selectPrompts(train_size, plan.seed, w.dispatched, plan.prompts_per_step, train_strata);
      const prompts = await this.acts.episodePrompts({
        dataset_ref: this.state.dataset!.train_ref,
        indices: pick.indices,
        multi_turn: plan.episode.multi_turn,
        system_prompt: plan.system_prompt,
        environment: plan.episode.environment,
      });
      w.batches.push({
        step: next,
        data_before: w.dispatched,
        data_after: pick.next,
        prompts: prompts.map((p) => ({
          prompt: p.prompt,
          label: p.label,
          ...(p.env_state !== undefined ? { env_state: p.env_state } : {}),
        })),
        first_sample: 0,
      });
      w.dispatched = pick.next;
    }
  }

  /** Starts episodes, oldest batch first, keeping at most plan.concurrency in flight; runs until close(). */
  start(): void {
    this.closing = false;
    this.pump ??= this.run().finally(() => (this.pump = null));
  }

  /** Stops starting episodes and waits for the starts under way (before continue-as-new or the end). */
  async close(): Promise<void> {
    this.closing = true;
    await this.pump;
  }

  /** Waits until every episode of `step`'s batch has reported. */
  async waitFor(step: number, onProgress: (done: number, total: number) => void): Promise<void> {
    const b = this.batch(step);
    const ids = batchEpisodeIds(this.state.plan, this.state.run_id, b);
    const done = () => ids.filter((id) => this.window.finished[id]).length;
    if (!this.reconciled) {
      this.reconciled = true;
      await this.reconcile();
    }
    this.waitingFor = step;
    try {
      for (;;) {
        onProgress(done(), ids.length);
        if (done() === ids.length) return;
        const before = done();
        if (!(await condition(() => done() !== before, RECONCILE_MS))) await this.reconcile();
      }
    } finally {
      this.waitingFor = null;
    }
  }

  /** Waits until every episode of every batch in the window has reported (run.deterministic: before a
   *  weight sync, so that no episode sees two versions of the weights). */
  async drain(): Promise<void> {
    const ids = () => this.window.batches.flatMap((b) => batchEpisodeIds(this.state.plan, this.state.run_id, b));
    const left = () => ids().filter((id) => !this.window.finished[id]).length;
    this.draining = true; // a pause or stop waits for these too: they must run on these weights
    try {
      while (left() > 0) {
        const before = left();
        if (!(await condition(() => left() !== before, RECONCILE_MS))) await this.reconcile();
      }
    } finally {
      this.draining = false;
    }
  }

  /** The batch's summaries (in episode order), and the batch leaves the window. */
  take(step: number): { batch: WindowBatch; summaries: EpisodeSummary[] } {
    const w = this.window;
    const batch = this.batch(step);
    const ids = batchEpisodeIds(this.state.plan, this.state.run_id, batch);
    const summaries = ids.map((id) => w.finished[id]!);
    for (const id of ids) {
      delete w.started[id];
      delete w.finished[id];
    }
    w.batches = w.batches.filter((x) => x !== batch);
    return { batch, summaries };
  }

  /** Every episode of the batch failed: the same prompts again under new episode ids. */
  redo(batch: WindowBatch): void {
    this.window.batches.unshift({ ...batch, first_sample: batch.first_sample + this.state.plan.n_samples_per_prompt });
  }

  private batch(step: number): WindowBatch {
    const b = this.window.batches.find((x) => x.step === step);
    if (!b) throw new Error(`the async window has no batch for step ${step}`);
    return b;
  }

  private queued(): Array<{ id: string; input: EpisodeInput }> {
    const { plan, run_id } = this.state;
    const w = this.window;
    return w.batches.flatMap((b) =>
      batchEpisodeIds(plan, run_id, b).flatMap((id, k) => {
        if (w.started[id] !== undefined) return [];
        const p = b.prompts[Math.floor(k / plan.n_samples_per_prompt)]!;
        const input: EpisodeInput = {
          run_id,
          step: b.step,
          prompt_index: Math.floor(k / plan.n_samples_per_prompt),
          sample_index: b.first_sample + (k % plan.n_samples_per_prompt),
          prompt: p.prompt,
          label: p.label,
          ...(p.env_state !== undefined ? { env_state: p.env_state } : {}),
          settings: plan.episode,
          weight_version: this.state.weight_version,
          blob_store: plan.blob_store,
          report_to: workflowInfo().workflowId,
        };
        return [{ id, input }];
      }),
    );
  }

  private inFlight(): number {
    const w = this.window;
    return Object.keys(w.started).filter((id) => !w.finished[id]).length;
  }

  /** Episodes to start now: a pause or a stop holds back all but the batch a step is waiting for
   *  (the step finishes before the run pauses or stops). */
  private startable(): Array<{ id: string; input: EpisodeInput }> {
    const { plan, weight_version } = this.state;
    // run.deterministic: step s's episodes start on the weights of step s − k exactly (drain() keeps
    // those weights on the engines until they finish).
    const k = plan.episode.max_staleness ?? 0;
    const q = this.queued().filter((e) => !plan.deterministic || e.input.step - k <= weight_version);
    if (!this.holding() || this.draining) return q;
    return this.waitingFor === null ? [] : q.filter((e) => e.input.step === this.waitingFor);
  }

  private async run(): Promise<void> {
    const limit = this.state.plan.concurrency;
    const ready = () => this.closing || (this.inFlight() < limit && this.startable().length > 0);
    for (;;) {
      await condition(ready);
      if (this.closing) return;
      const batch = this.startable().slice(0, limit - this.inFlight());
      for (const { id, input } of batch) this.window.started[id] = input.weight_version;
      await Promise.all(batch.map(({ id, input }) => this.startOne(id, input)));
    }
  }

  private async startOne(id: string, input: EpisodeInput): Promise<void> {
    try {
      // ABANDON: the episode outlives this workflow run (continue-as-new, a stop) and reports by id.
      await startChild(episode, {
        ...episodeStartOptions(id),
        args: [input],
        parentClosePolicy: ParentClosePolicy.ABANDON,
      });
    } catch (err) {
      // Started before (a run that stopped and continued): its outcome is looked up.
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      await this.reconcile([id]);
    }
  }

  /** Looks up episodes that have not reported: finished ones give their summary; one that ended
   *  without a result (terminated, failed) counts as FAILED. */
  private async reconcile(only?: string[]): Promise<void> {
    const w = this.window;
    const ids = (only ?? Object.keys(w.started)).filter((id) => !w.finished[id]);
    if (!ids.length) return;
    const outcomes = await this.acts.episodeOutcomes({ ids });
    ids.forEach((id, i) => {
      const o = outcomes[i];
      if (w.finished[id] || o === undefined || o === 'running') return;
      w.finished[id] =
        o === 'gone'
          ? {
              episode_id: id,
              sample_ref: '',
              reward: 0,
              status: 'FAILED',
              truncated_reason: 'episode workflow ended without a result',
              response_len: 0,
              turns: 0,
              weight_version: w.started[id] ?? 0,
            }
          : o;
    });
  }
}

/** Versions between the weights being trained and those that started each episode. */
export function stalenessMetrics(summaries: EpisodeSummary[], trainedVersion: number): Record<string, number> {
  const lags = summaries.map((e) => trainedVersion - e.weight_version);
  return {
    'rollout/staleness_mean': lags.length ? lags.reduce((a, b) => a + b, 0) / lags.length : 0,
    'rollout/staleness_max': lags.length ? Math.max(...lags) : 0,
  };
}
