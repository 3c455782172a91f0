// Step "store": the sample (docs/CONTRACTS.md) into the blob store. The workflow sends a small
// recipe (blob refs of the prompt and of each turn's output, each observation's tokens); this
// activity stitches the arrays again with the same pure code the workflow ran and checks that they
// agree with the workflow's counts, so the full token arrays never travel through a payload.
import { ApplicationFailure } from '@temporalio/common';
import type { BlobStore } from '../lib/blobstore.js';
import { refuseForeignBlobRoot } from './blob-root.js';
import { Sample } from '../lib/contract.js';
import { appendGenerated, appendObservation, checkInvariants, startTrajectory, type EpisodeStatus, type TokenConventions } from '../lib/trajectory.js';
import { groupId, toolSummaryOf, type EpisodeSummary } from '../workflows/episode-messages.js';
import { TurnOutput } from './generate.js';
import { loadStoredPrompt } from './render.js';

export interface SampleTurnRecipe {
  output_ref: string;
  observation_ids: number[] | null;
  engine: string;
  /** null: the engine reported no weight version (unknown, never assumed). */
  weight_version: number | null;
  finish_reason: string;
  /** Multi-turn: the answer a tool call of this turn gave (calc_score, submit; null: none, another tool, or malformed), and its grade. */
  tool_answer?: string | null;
  tool_score?: number | null;
}

export interface StoreSampleInput {
  episode_id: string;
  run_id: string;
  step: number;
  prompt_index: number;
  sample_index: number;
  prompt_ref: string | null;
  limits: { max_response_len: number; max_context_len: number };
  conventions: TokenConventions | null;
  turns: SampleTurnRecipe[];
  images: string[];
  reward: number;
  status: EpisodeStatus;
  truncated_reason: string | null;
  temperature: number;
  label: string;
  /** The episode's environment; absent in histories recorded before samples carried it. */
  environment?: string;
  expected: { response_len: number; mask_sum: number };
  /** The run's blob store (plan.blob_store, a store URI); blob_root (a directory) in histories recorded
   *  before the store was configurable; neither in those before episodes carried it. */
  blob_store?: string;
  blob_root?: string;
}

export function sampleKey(episodeId: string): string {
  return `samples/${episodeId}.json`;
}

export function sampleActivities(deps: { store: BlobStore }) {
  return {
    async storeSample(input: StoreSampleInput): Promise<{ sample_ref: string }> {
      refuseForeignBlobRoot(deps.store, input, `storeSample of episode ${input.episode_id}`);
      const prompt_ids = input.prompt_ref ? (await loadStoredPrompt(deps.store, input.prompt_ref)).prompt_ids : [];
      const t = startTrajectory(prompt_ids.length, input.limits);
      const routed: Array<string | null> = [];
      for (const turn of input.turns) {
        const out = TurnOutput.parse(await deps.store.getJson(turn.output_ref));
        if (!input.conventions) throw ApplicationFailure.nonRetryable('turns without token conventions', 'InvalidSampleRecipe');
        appendGenerated(t, out, input.conventions);
        routed.push(out.routed_experts);
        if (turn.observation_ids) appendObservation(t, turn.observation_ids, input.conventions);
      }
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
        ...(input.environment !== undefined ? { environment: input.environment } : {}),
        turns: input.turns.map((turn, i) => {
          const span = t.spans[i];
          return {
            engine: turn.engine,
            weight_version: turn.weight_version,
            generated_tokens: span?.gen_len ?? 0,
            observation_tokens: span?.obs_len ?? 0,
            finish_reason: turn.finish_reason,
            ...(turn.tool_answer !== undefined ? { tool_answer: turn.tool_answer, tool_score: turn.tool_score ?? null } : {}),
          };
        }),
        routed_experts: routed.some((r) => r !== null) ? routed : null,
      };
      const inv = checkInvariants(sample, t.budget);
      const mask_sum = inv.mask_sum;
      if (!inv.ok || sample.response_ids.length !== input.expected.response_len || mask_sum !== input.expected.mask_sum)
        throw ApplicationFailure.nonRetryable(
          `sample ${input.episode_id} does not match the workflow's trajectory: ${sample.response_ids.length}/${input.expected.response_len} tokens, mask sum ${mask_sum}/${input.expected.mask_sum}; ${inv.problems.join('; ')}`,
          'SampleMismatch',
        );
      return { sample_ref: await deps.store.putJson(sampleKey(input.episode_id), Sample.parse(sample)) };
    },

    /** The summary of an episode whose sample is already stored (a retried step), or null.
     *  `weight_version`: the episode's (its turns may hold null where the engine reported none). */
    async loadEpisodeSummary(input: { episode_id: string; weight_version?: number; blob_store?: string; blob_root?: string }): Promise<EpisodeSummary | null> {
      refuseForeignBlobRoot(deps.store, input, `loadEpisodeSummary of episode ${input.episode_id}`);
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
