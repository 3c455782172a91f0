// The contract of the test-only activities, served by the tests' workers and never by the product's:
// rolloutInfo and waitForFile (testing/test-activities.ts, the tests' rollout worker) and trainer_info
// (testing/trainer_worker.py, the tests' trainer worker). Pure: the test workflows import it.
import { z } from 'zod';

/** Which trainer worker answered trainer_info (testing/trainer_worker.py TrainerInfoOutput). */
export const TrainerInfo = z.object({
  torch_version: z.string(),
  device: z.string(),
  cuda_available: z.boolean(),
  python_version: z.string(),
  /** The blob store of the worker's stack (--blob-store), canonical; null when it was started without one. */
  blob_store: z.string().nullable().optional(),
});
export type TrainerInfo = z.infer<typeof TrainerInfo>;

/** Which rollout worker answered rolloutInfo. */
export const RolloutInfo = z.object({
  node_version: z.string(),
  platform: z.string(),
  worker_pid: z.number().int(),
  /** The worker's blob store (canonical URI). */
  blob_store: z.string(),
});
export type RolloutInfo = z.infer<typeof RolloutInfo>;

export interface TestRolloutActivities {
  rolloutInfo(): Promise<RolloutInfo>;
  /** Blocks (heartbeating) until the file exists; returns its content with the label. */
  waitForFile(input: { path: string; label: string }): Promise<string>;
}
