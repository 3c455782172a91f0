// Step "store": the sample (docs/CONTRACTS.md) into the blob store, from the trajectory the episode's
// activities stitched (activities/trajectory-store.ts) and the workflow's per-turn record (engine,
// weight version, finish reason, tool answer). Nothing is stitched again here, and no token array
// travels through a payload.
import { ApplicationFailure } from '@temporalio/common';
import type { BlobStore } from '../stores/blobstore.js';
import { sampleKey } from '../stores/layout.js';
import { Sample } from '../lib/contract.js';
import { checkInvariants, type Trajectory } from '../lib/trajectory.js';
import type { LoadEpisodeSummaryInput, StoreSampleInput } from '../protocol/activities.js';
import { groupId, toolSummaryOf, type EpisodeSummary } from '../protocol/episode.js';
import { refuseForeignBlobStore } from './blob-root.js';
import { loadStoredPrompt } from './render.js';
import { loadTrajectory } from './trajectory-store.js';

/** The sample's turns: what the workflow recorded of each, and where its tokens sit. */
function sampleTurns(input: StoreSampleInput, t: Trajectory): Sample['turns'] {
  return input.turns.map((turn, i) => {
    const span = t.spans[i];
    return {
      engine: turn.engine,
      weight_version: turn.weight_version,
      generated_tokens: span?.gen_len ?? 0,
      observation_tokens: span?.obs_len ?? 0,
      finish_reason: turn.finish_reason,
      ...(turn.tool_answer !== undefined ? { tool_answer: turn.tool_answer, tool_score: turn.tool_score ?? null } : {}),
    };
  });
}

export function sampleActivities(deps: { store: BlobStore }) {
  return {
    async storeSample(input: StoreSampleInput): Promise<{ sample_ref: string }> {
      refuseForeignBlobStore(deps.store, input, `storeSample of episode ${input.episode_id}`);
      const prompt_ids = input.prompt_ref ? (await loadStoredPrompt(deps.store, input.prompt_ref)).prompt_ids : [];
      const { trajectory: t, routed_experts: routed } = await loadTrajectory(deps.store, input.trajectory_ref, {
        prompt_len: prompt_ids.length,
        limits: input.limits,
      });
      if (t.prompt_len !== prompt_ids.length)
        throw ApplicationFailure.nonRetryable(
          `sample ${input.episode_id}: the trajectory follows a prompt of ${t.prompt_len} tokens, the prompt has ${prompt_ids.length}`,
          'InvalidSampleRecipe',
        );
      const sample: Sample = {
        schema_version: 1,
        episode_id: input.episode_id,
        run_id: input.run_id,
        step: input.step,
        prompt_index: input.prompt_index,
        sample_index: input.sample_index,
        group_id: groupId(input),
        prompt_ids,
        response_ids: t.response_ids,
        loss_mask: t.loss_mask as Array<0 | 1>,
        rollout_logprobs: t.logprobs,
        images: input.images,
        reward: input.reward,
        status: input.status,
        truncated_reason: input.truncated_reason,
        temperature: input.temperature,
        label: input.label,
        environment: input.environment,
        turns: sampleTurns(input, t),
        routed_experts: routed.some((r) => r !== null) ? routed : null,
      };
      const inv = checkInvariants(sample, t.budget);
      if (!inv.ok)
        throw ApplicationFailure.nonRetryable(
          `sample ${input.episode_id}: ${inv.problems.join('; ')}`,
          'SampleMismatch',
        );
      return { sample_ref: await deps.store.putJson(sampleKey(input.episode_id), Sample.parse(sample)) };
    },

    /** The summary of an episode whose sample is already stored (a retried step), or null. */
    async loadEpisodeSummary(input: LoadEpisodeSummaryInput): Promise<EpisodeSummary | null> {
      refuseForeignBlobStore(deps.store, input, `loadEpisodeSummary of episode ${input.episode_id}`);
      const ref = deps.store.namedRef(sampleKey(input.episode_id));
      if (!(await deps.store.exists(ref))) return null;
      const s = Sample.parse(await deps.store.getJson(ref));
      return {
        episode_id: s.episode_id,
        sample_ref: ref,
        reward: s.reward,
        status: s.status,
        truncated_reason: s.truncated_reason,
        response_len: s.response_ids.length,
        turns: s.turns.length,
        weight_version: input.weight_version ?? s.turns.find((t) => t.weight_version !== null)?.weight_version ?? 0,
        ...toolSummaryOf(s.turns),
      };
    },
  };
}
