// bench/rollout-path.ts's plain loop: the episode's activities with the same engine requests as the
// product's (the engine port of activities/episode-engines.ts: render once, then per turn generate and
// detokenize, the environment's step in this process, the observation's tokens from the engine's
// template) but nothing durable: prompts and trajectories stay in memory, no blob is written, no
// retry. Run through bench/overhead-direct.ts directEpisode (the workflow's control flow).
import { resolveImageUrls } from '../lib/data/prompt-images.js';
import {
  appendGenerated,
  appendObservation,
  forbiddenResponseTokens,
  idsForText,
  startTrajectory,
  type Stop,
  type Trajectory,
} from '../lib/trajectory.js';
import { envStep } from '../activities/env-step.js';
import type { EpisodeEngines } from '../activities/episode-engines.js';
import { imageRefsOf, observationRenderer } from '../activities/render.js';
import { scoreEpisode } from '../activities/score.js';
import type { DirectActivities } from './overhead-direct.js';
import type { BlobStore } from '../stores/blobstore.js';

/** The episode activities in memory over `engines`; `store` only holds the prompts' images. */
export function plainActivities(engines: EpisodeEngines, store: BlobStore): DirectActivities {
  const prompts = new Map<string, { ids: number[]; features: unknown | null }>();
  // An episode's trajectory, grown in place (no retries here); each step gets a ref of its own.
  const trajectories = new Map<string, Trajectory>();
  let next = 0;
  const keep = (episodeId: string, t: Trajectory) => {
    trajectories.set(episodeId, t);
    return `mem:${next++}`;
  };
  const step = (t: Trajectory, ref: string, stop: Stop | null) => ({
    trajectory_ref: ref,
    response_len: t.response_ids.length,
    stop,
    forbidden: null,
  });
  const observation = observationRenderer({ engines: () => engines });
  return {
    async renderPrompt(input) {
      const rendered = await engines.render(
        { messages: await resolveImageUrls(input.messages, store), tools: input.tools, add_generation_prompt: true },
        { session_id: input.episode_id },
      );
      const conv = await engines.tokenConventions();
      const prompt_ref = `mem-prompt:${input.episode_id}`;
      prompts.set(prompt_ref, { ids: rendered.token_ids, features: rendered.features });
      return {
        engine: rendered.engine,
        prompt_ref,
        prompt_len: rendered.token_ids.length,
        image_refs: imageRefsOf(input.messages),
        conventions: {
          eos_ids: conv.eos_ids,
          end_of_turn_id: conv.end_of_turn_id,
          forbidden_response_ids: conv.forbidden_response_ids ?? [],
        },
        image_tokens: { in_prompt: 0, expected: null, engine_reported: null },
      };
    },

    async generateTurn(input) {
      const prompt = prompts.get(input.prompt_ref)!;
      const t = input.trajectory_ref
        ? trajectories.get(input.episode_id)!
        : startTrajectory(prompt.ids.length, input.limits);
      const out = await engines.generate({
        session_id: input.episode_id,
        token_ids: [...prompt.ids, ...t.response_ids],
        features: prompt.features,
        sampling: input.sampling,
        exclude_engines: [],
      });
      const stop = appendGenerated(t, out, input.conventions) ?? forbiddenResponseTokens(t, input.conventions);
      const conv = await engines.tokenConventions();
      const text = await engines.detokenize(idsForText(out.token_ids, conv.eos_ids));
      return {
        ...step(t, keep(input.episode_id, t), stop),
        engine: out.engine,
        attempt: 1,
        generated_tokens: out.token_ids.length,
        mean_logprob: null,
        synthetic_eos: t.spans.at(-1)?.synthetic_eos_at != null,
        finish_reason: out.finish_reason,
        stop_reason: out.stop_reason,
        text,
        output_ref: '',
        weight_version: typeof out.weight_version === 'number' ? out.weight_version : null,
        has_routed_experts: false,
      };
    },

    envStep,

    async renderObservation(input) {
      const obs = await observation(input);
      const t = trajectories.get(input.episode_id)!;
      const before = t.response_ids.length;
      const stop = appendObservation(t, obs.token_ids, input.conventions);
      return {
        ...step(t, keep(input.episode_id, t), stop),
        engine: obs.engine,
        observation_tokens: t.response_ids.length - before,
      };
    },

    scoreEpisode,

    async storeSample(input) {
      prompts.delete(input.prompt_ref ?? '');
      trajectories.delete(input.episode_id);
      return { sample_ref: '' };
    },
  };
}
