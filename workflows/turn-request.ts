// One turn's engine request, as every episode workflow sends it (the TS environments' episode, the
// verifiers and OpenEnv episodes; the overhead bench's direct loop builds the same).
import type { GenerateTurnInput } from '../protocol/activities.js';
import { type EpisodeInput, turnSeed } from '../protocol/episode.js';
import type { TokenConventions } from '../lib/trajectory.js';

/**
 * The turn's sampling (the run's settings, the turn's own seed) and the weights it accepts: the
 * episode's own; in the async window any as new, where under rollout.sync_in_flight abort a turn a
 * weight sync aborted is generated again rather than kept cut short.
 */
export function turnRequest(
  input: EpisodeInput,
  id: string,
  turn: number,
  prompt: { prompt_ref: string; conventions: TokenConventions },
  trajectoryRef: string | null,
  maxTokens: number,
): GenerateTurnInput {
  const s = input.settings;
  return {
    episode_id: id,
    turn,
    prompt_ref: prompt.prompt_ref,
    trajectory_ref: trajectoryRef,
    limits: { max_response_len: s.max_response_len, max_context_len: s.max_context_len },
    conventions: prompt.conventions,
    sampling: {
      max_tokens: maxTokens,
      temperature: s.temperature,
      top_p: s.top_p,
      seed: turnSeed(s.seed, id, turn),
      stop: s.stop,
    },
    ...(s.max_staleness
      ? {
          min_weight_version: input.weight_version,
          ...(s.sync_in_flight === 'abort' ? { regenerate_aborted: true } : {}),
        }
      : { expected_weight_version: input.weight_version }),
  };
}
