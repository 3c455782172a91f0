// Where a training run's steps come from: a StepSource gives each step its batch to train. GRPO's
// batches are episodes, sampled synchronously by the current weights (SyncRollout) or from the async
// window (WindowRollout, workflows/rollout-window.ts), then group-filtered (RolloutSteps); SFT's are
// rendered records (workflows/sft-steps.ts).
import { CancellationScope, condition } from '@temporalio/workflow';
import type { TrainStepInput } from '../lib/contract.js';
import { selectPrompts, type DataCursor } from '../lib/prompt-order.js';
import type { EpisodeInput, EpisodeSummary } from '../protocol/episode.js';
import type { RunStatus } from '../protocol/training-run.js';
import { runEpisodes } from './episode-children.js';
import { groupFilter, groupKey, rolloutMetrics } from './rollout-metrics.js';
import { stalenessMetrics, WindowRunner } from './rollout-window.js';
import { rolloutActs as acts } from './run-activities.js';
import type { TrainingRun } from './training-run-state.js';

/** What one step trains on, and what its record says. */
export interface TrainBatch {
  samples: TrainStepInput['samples'];
  metrics: Record<string, number>;
  episodes: Array<{ episode_id: string; trained: boolean }>;
  dataAfter: DataCursor;
}

/** A step's batch; or redo the step (paused mid-step, or every episode failed); or the run ends. */
export type StepOutcome = { train: TrainBatch } | { redo: true } | { end: RunStatus; reason?: string };

export interface StepSource {
  next(): Promise<StepOutcome>;
  /** After the step trained, before the new weights reach the engines. */
  beforeSync(): Promise<void>;
  /** Before continue-as-new: nothing left half-issued, and what the next run takes over is in the state. */
  suspend(): Promise<void>;
  /** At the end of the run. */
  close(): Promise<void>;
}

/** A step's episodes. */
interface Rolled {
  summaries: EpisodeSummary[];
  dataAfter: DataCursor;
  /** Every episode failed: sample the same prompts again under new episode ids. */
  redo: () => void;
}

interface Rollout {
  /** The step's episodes; null: paused now (cancelled), the step is redone. */
  batch(): Promise<Rolled | null>;
  metrics(summaries: EpisodeSummary[]): Record<string, number>;
  beforeSync(): Promise<void>;
  close(): Promise<void>;
}

/** The step's episodes, sampled now by the current weights. */
export class SyncRollout implements Rollout {
  constructor(private readonly run: TrainingRun) {}

  async batch(): Promise<Rolled | null> {
    // The step's scope is open from its first await, so a "pause now" while its prompts are read is
    // honoured too (no episode starts; the step is redone on resume).
    this.run.episodeScope = new CancellationScope();
    try {
      return await this.sample(this.run.episodeScope);
    } finally {
      this.run.episodeScope = null;
    }
  }

  private async sample(scope: CancellationScope): Promise<Rolled | null> {
    const { state, plan, progress } = this.run;
    const dataset = state.dataset!;
    const pick = selectPrompts(dataset.train_size, plan.seed, state.data, plan.prompts_per_step, dataset.train_strata);
    const prompts = await acts.episodePrompts({
      dataset_ref: dataset.train_ref,
      indices: pick.indices,
      multi_turn: plan.episode.multi_turn,
      system_prompt: plan.system_prompt,
      environment: plan.episode.environment,
    });
    if (scope.consideredCancelled) return null;
    const inputs: EpisodeInput[] = [];
    // A redone empty step samples the same prompts again under new episode ids (the failed episodes
    // completed, and a completed episode is never run twice): sample indices past the earlier tries'.
    const firstSample = (state.empty_redos ?? 0) * plan.n_samples_per_prompt;
    prompts.forEach((p, promptIndex) => {
      for (let s = firstSample; s < firstSample + plan.n_samples_per_prompt; s++)
        inputs.push({
          run_id: state.run_id,
          step: state.step,
          prompt_index: promptIndex,
          sample_index: s,
          prompt: p.prompt,
          label: p.label,
          ...(p.env_state !== undefined ? { env_state: p.env_state } : {}),
          settings: plan.episode,
          weight_version: state.weight_version,
          blob_store: plan.blob_store,
        });
    });
    const summaries = await runEpisodes(inputs, plan.concurrency, progress, scope);
    return scope.consideredCancelled ? null : { summaries, dataAfter: pick.next, redo: () => undefined };
  }

  metrics(): Record<string, number> {
    return {};
  }

  async beforeSync(): Promise<void> {}

  async close(): Promise<void> {}
}

/** The step's batch from the async window, once complete; the window is filled up to step + k
 *  first, so the next k steps' episodes run while this one trains. */
export class WindowRollout implements Rollout {
  private readonly window: WindowRunner;

  constructor(private readonly run: TrainingRun) {
    this.window = new WindowRunner(run.state, acts, () => run.state.paused || run.stopRequested);
  }

  async batch(): Promise<Rolled> {
    const { state, progress } = this.run;
    await this.window.fill(state.step + this.run.staleness);
    this.window.start();
    await this.window.waitFor(state.step, (done, total) =>
      Object.assign(progress, { episodes_done: done, episodes_total: total }),
    );
    const { batch, summaries } = this.window.take(state.step);
    return { summaries, dataAfter: batch.data_after, redo: () => this.window.redo(batch) };
  }

  metrics(summaries: EpisodeSummary[]): Record<string, number> {
    return stalenessMetrics(summaries, this.run.state.weight_version);
  }

  /** run.deterministic: the window's episodes finish on the weights they started on. */
  async beforeSync(): Promise<void> {
    if (this.run.plan.deterministic) await this.window.drain();
  }

  close(): Promise<void> {
    return this.window.close(); // no episode start half-issued: the next run starts what is left
  }
}

/** GRPO steps: a rollout's episodes, failed ones and (grpo.zero_std_filter) all-equal groups dropped;
 *  a step whose episodes all failed is redone after a wait, up to run.empty_step_retries. */
export class RolloutSteps implements StepSource {
  /** This workflow run's tries of an empty step (a continued run gets its own tries). */
  private emptyTries = 0;

  constructor(
    private readonly run: TrainingRun,
    private readonly rollout: Rollout,
  ) {}

  async next(): Promise<StepOutcome> {
    const rolled = await this.rollout.batch();
    if (!rolled) return { redo: true };
    const { summaries, dataAfter } = rolled;
    const groups = groupFilter(summaries, this.run.plan.zero_std_filter);
    if (summaries.length > 0 && groups.failed === summaries.length) return this.emptyStep(rolled);
    this.run.state.empty_redos = 0;
    this.emptyTries = 0;
    return {
      train: {
        samples: groups.kept.map((e) => ({ ref: e.sample_ref, reward: e.reward, group_id: groupKey(e) })),
        metrics: { ...rolloutMetrics(summaries, groups), ...this.rollout.metrics(summaries) },
        episodes: summaries.map((e) => ({ episode_id: e.episode_id, trained: groups.kept.includes(e) })),
        dataAfter,
      },
    };
  }

  /** Every episode failed (engines down, workers gone): training on nothing would move the data
   *  cursor past these prompts for good. Redo the step after a wait; past the limit, end the run. */
  private async emptyStep({ summaries, redo }: Rolled): Promise<StepOutcome> {
    const { state, plan } = this.run;
    state.empty_redos = (state.empty_redos ?? 0) + 1;
    redo();
    const tries = ++this.emptyTries;
    if (tries > plan.empty_step_retries) {
      const why = summaries.find((e) => e.truncated_reason)?.truncated_reason ?? 'unknown';
      return {
        end: 'failed',
        reason:
          `step ${state.step}: all ${summaries.length} episodes failed in each of ${tries} tries (first reason: ${why});` +
          ' nothing was trained and the data cursor did not move — fix the engines or workers, then continue the run',
      };
    }
    this.run.progress.phase = 'idle';
    await condition(() => this.run.stopRequested, plan.empty_step_wait_s * tries * 1000);
    return this.run.stopRequested ? { end: 'stopped' } : { redo: true };
  }

  beforeSync(): Promise<void> {
    return this.rollout.beforeSync();
  }

  suspend(): Promise<void> {
    return this.rollout.close();
  }

  close(): Promise<void> {
    return this.rollout.close();
  }
}
