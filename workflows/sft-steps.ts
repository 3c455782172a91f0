// SFT steps: each step's records, rendered as samples by the rollout worker. The next step's records
// render while this one trains (the engines and the trainer are different processes). Rendering is
// idempotent — a step's samples are named by run, step and position — so a render no step takes (a
// stop, a continue-as-new) costs nothing but its time.
import { selectPrompts } from '../lib/prompt-order.js';
import type { SftBatchResult } from '../protocol/activities.js';
import type { SftAhead } from '../protocol/training-run.js';
import { rolloutActs as acts } from './run-activities.js';
import { sftMetrics } from './sft-metrics.js';
import type { StepOutcome, StepSource } from './step-sources.js';
import type { TrainingRun } from './training-run-state.js';

export class SftSteps implements StepSource {
  /** The next step's batch, rendering while this step trains. */
  private ahead: { step: number; indices: number[]; batch: Promise<SftBatchResult> } | null = null;

  constructor(private readonly run: TrainingRun) {}

  async next(): Promise<StepOutcome> {
    const { state, plan } = this.run;
    const dataset = state.dataset!;
    const pick = selectPrompts(dataset.train_size, plan.seed, state.data, plan.prompts_per_step);
    const batch = await this.batch(state.step, pick.indices);
    if (state.step + 1 < plan.steps && plan.sft_render_ahead !== false) {
      const nextPick = selectPrompts(dataset.train_size, plan.seed, pick.next, plan.prompts_per_step);
      this.ahead = {
        step: state.step + 1,
        indices: nextPick.indices,
        batch: this.batch(state.step + 1, nextPick.indices),
      };
      this.ahead.batch.catch(() => undefined); // its failure is the next step's to report
    }
    return {
      train: {
        samples: batch.samples.map((b) => ({ ref: b.sample_ref, reward: 0, group_id: b.record_id })),
        metrics: sftMetrics(batch),
        episodes: [
          ...batch.samples.map((b) => ({ episode_id: b.id, trained: true })),
          ...batch.skipped.map((b) => ({ episode_id: b.id, trained: false })),
        ],
        dataAfter: pick.next,
      },
    };
  }

  /** The step rendering ahead goes to the next run with the state (failed: the next run renders it). */
  async suspend(): Promise<void> {
    const ahead = this.ahead;
    if (ahead)
      this.run.state.sft_next = await ahead.batch.then(
        (batch): SftAhead => ({ step: ahead.step, indices: ahead.indices, batch }),
        () => null,
      );
  }

  async beforeSync(): Promise<void> {}

  async close(): Promise<void> {}

  /** A step's records as samples: rendered ahead while the step before trained, or now. */
  private batch(step: number, indices: number[]): Promise<SftBatchResult> {
    const { state, plan } = this.run;
    // Rendered in this execution, or carried into it with the state (only ever one of the two).
    const carried = state.sft_next;
    const ahead = this.ahead ?? (carried ? { ...carried, batch: Promise.resolve(carried.batch) } : null);
    state.sft_next = null;
    this.ahead = null;
    if (ahead && ahead.step === step && ahead.indices.join() === indices.join()) return ahead.batch;
    return acts.renderSftBatch({
      run_id: state.run_id,
      step,
      dataset_ref: state.dataset!.train_ref,
      indices,
      limits: { max_response_len: plan.episode.max_response_len, max_context_len: plan.episode.max_context_len },
      blob_store: plan.blob_store,
    });
  }
}
