// The trainer's per-token logprobs of a trained sample: what the trainer's forward gave each response
// token under the weights that sampled it, written by the train step beside the sample
// (workers/trainer/step/token_logprobs.py: `samples/<episode id>.trainer-logprobs.json`, one small
// JSON blob a sample, rounded to 1e-4, written by the attempt whose commit won the step). The episode
// page puts them beside the engine's and colours each token by the difference, as prime-rl colours
// tokens by their mismatch (https://github.com/PrimeIntellect-ai/prime-rl/pull/2551).
import { z } from 'zod';
import type { BlobStore } from '../stores/blobstore.js';

/** The blob's key: the sample's own key (`samples/<episode id>.json`) with another suffix. */
export function trainerLogprobsKey(episodeId: string): string {
  return `samples/${episodeId}.trainer-logprobs.json`;
}

export const TrainerLogprobs = z.object({
  schema_version: z.literal(1),
  episode_id: z.string(),
  /** The step that trained the sample (its logprobs are under the weights before that step's update). */
  step: z.number().int().nonnegative(),
  /** One a response token, in response order (observation and synthetic tokens included); null where
   *  the trainer's was not finite (JSON has no NaN). */
  logprobs: z.array(z.number().nullable()),
});
export type TrainerLogprobs = z.infer<typeof TrainerLogprobs>;

/** The trainer's logprobs of an episode's sample, or null when none were written (not trained, an
 *  SFT step, a sample over the trainer's bound, a trainer that does not write them). A blob of the
 *  wrong shape is named. */
export async function trainerLogprobs(store: BlobStore, episodeId: string): Promise<TrainerLogprobs | null> {
  const ref = store.namedRef(trainerLogprobsKey(episodeId));
  if (!(await store.exists(ref))) return null;
  const parsed = TrainerLogprobs.safeParse(await store.getJson(ref));
  if (!parsed.success) throw new Error(`${ref}: not the trainer's logprobs (${parsed.error.issues[0]?.message})`);
  return parsed.data;
}
