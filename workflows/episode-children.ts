// A training run's episodes as child workflows: a synchronous step's (cancellable by "pause now") and
// an eval's. A completed episode is never run again: a retried or resumed step finds its summary.
import { CancellationScope, isCancellation, ParentClosePolicy, startChild } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import { episodeId, episodeStartOptions, type EpisodeInput, type EpisodeSummary } from '../protocol/episode.js';
import type { RunPlan, RunProgress, RunState } from '../protocol/training-run.js';
import { episode } from './episode.js';
import { rolloutActs as acts } from './run-activities.js';
import { evalMetricsOf } from './rollout-metrics.js';

/** Runs episodes as child workflows, at most `limit` at once, in the cancellable `scope`; [] when that
 *  scope was cancelled (pause now). */
export async function runEpisodes(
  inputs: EpisodeInput[],
  limit: number,
  progress: RunProgress,
  scope = new CancellationScope(),
): Promise<EpisodeSummary[]> {
  progress.episodes_total = inputs.length;
  progress.episodes_done = 0;
  const results: EpisodeSummary[] = new Array(inputs.length);
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
    const child = await startChild(episode, {
      ...episodeStartOptions(id),
      args: [input],
      parentClosePolicy: ParentClosePolicy.TERMINATE,
    });
    return await child.result();
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) {
      const done = await acts.loadEpisodeSummary({
        episode_id: id,
        weight_version: input.weight_version,
        blob_store: input.blob_store,
      });
      if (done) return done;
    }
    if (isCancellation(err)) throw err;
    const message = (err as Error)?.message ?? String(err);
    return {
      episode_id: id,
      sample_ref: '',
      reward: 0,
      status: 'FAILED',
      truncated_reason: `episode workflow failed: ${message}`,
      response_len: 0,
      turns: 0,
      weight_version: input.weight_version,
    };
  }
}

/** The held-out split's episodes on the weights of `weightVersion`, as eval/* metrics. */
export async function runEval(
  state: RunState,
  plan: RunPlan,
  weightVersion: number,
  progress: RunProgress,
): Promise<Record<string, number>> {
  const d = state.dataset!;
  const n = Math.min(plan.eval_prompts, d.eval_size);
  const indices = Array.from({ length: n }, (_, i) => i);
  const prompts = await acts.episodePrompts({
    dataset_ref: d.eval_ref!,
    indices,
    multi_turn: plan.eval_episode.multi_turn,
    system_prompt: plan.system_prompt,
    environment: plan.eval_episode.environment,
  });
  // Keyed by the weight version evaluated: the start-of-run eval and each later one are distinct episodes.
  const inputs: EpisodeInput[] = prompts.map((p, i) => ({
    run_id: `${state.run_id}-eval`,
    step: weightVersion,
    prompt_index: i,
    sample_index: 0,
    prompt: p.prompt,
    label: p.label,
    ...(p.env_state !== undefined ? { env_state: p.env_state } : {}),
    settings: plan.eval_episode,
    weight_version: weightVersion,
    blob_store: plan.blob_store,
  }));
  return evalMetricsOf(await runEpisodes(inputs, plan.concurrency, progress));
}
