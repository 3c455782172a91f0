// An episode's stitched trajectory in the blob store: the activities that add to it (generateTurn,
// renderObservation) load it by ref, stitch onto it with lib/trajectory.ts and store the result
// content-addressed (a retried attempt that stitches the same tokens writes the same blob), and
// storeSample turns the last one into the sample. The workflow keeps only refs and counts.
import { z } from 'zod';
import type { BlobStore } from '../stores/blobstore.js';
import {
  forbiddenResponseTokens,
  startTrajectory,
  type Stop,
  type TokenConventions,
  type Trajectory,
} from '../lib/trajectory.js';
import type { ResponseLimits, TrajectoryStep } from '../protocol/activities.js';

const TurnSpan = z.object({
  gen_start: z.number().int(),
  gen_len: z.number().int(),
  synthetic_eos_at: z.number().int().nullable(),
  obs_start: z.number().int().nullable(),
  obs_len: z.number().int(),
});

export const StoredTrajectory = z.object({
  trajectory: z.object({
    prompt_len: z.number().int().nonnegative(),
    budget: z.number().int().nonnegative(),
    response_ids: z.array(z.number().int()),
    loss_mask: z.array(z.number().int()),
    logprobs: z.array(z.number()),
    spans: z.array(TurnSpan),
  }),
  /** Per generated turn (accepted or not), the engine's routed experts blob, or null. */
  routed_experts: z.array(z.string().nullable()),
});
export type StoredTrajectory = { trajectory: Trajectory; routed_experts: Array<string | null> };

/** The trajectory at `ref`; with `start`, a new one after a prompt of that many tokens when `ref` is null. */
export async function loadTrajectory(store: BlobStore, ref: string): Promise<StoredTrajectory>;
export async function loadTrajectory(
  store: BlobStore,
  ref: string | null,
  start: { prompt_len: number; limits: ResponseLimits },
): Promise<StoredTrajectory>;
export async function loadTrajectory(
  store: BlobStore,
  ref: string | null,
  start?: { prompt_len: number; limits: ResponseLimits },
): Promise<StoredTrajectory> {
  if (ref === null) return { trajectory: startTrajectory(start!.prompt_len, start!.limits), routed_experts: [] };
  return StoredTrajectory.parse(await store.getJson(ref));
}

/** Stores the trajectory and says where it stands (`stop`: why the episode cannot go on, or null). */
export async function saveTrajectory(
  store: BlobStore,
  stored: StoredTrajectory,
  stop: Stop | null,
  conventions: TokenConventions,
): Promise<TrajectoryStep> {
  const trajectory_ref = await store.putBytes(Buffer.from(JSON.stringify(stored)), 'json');
  return {
    trajectory_ref,
    response_len: stored.trajectory.response_ids.length,
    stop,
    forbidden: forbiddenResponseTokens(stored.trajectory, conventions),
  };
}
