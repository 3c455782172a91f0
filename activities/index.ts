// Every activity of the rollout worker. Activities that need shared state (config, blob store,
// engine pool) are built by a factory over `RolloutDeps` so tests can pass their own.
import type { TempoConfig } from '../config/schema.js';
import type { BlobStore } from '../stores/blobstore.js';
import { openConfiguredBlobStore } from '../lib/blob-store-config.js';
import { runActivities } from './run.js';
import { episodeActivities, defaultEpisodeDeps, type EpisodeDeps } from './episode.js';
import { sftActivities } from './sft.js';
import type { RolloutActivities } from '../protocol/activities.js';

export interface RolloutDeps extends Partial<EpisodeDeps> {
  cfg: TempoConfig;
  store: BlobStore;
}

/** The production deps: the configured blob store (blobs.uri). */
export async function rolloutDeps(cfg: TempoConfig): Promise<RolloutDeps> {
  return { cfg, store: await openConfiguredBlobStore(cfg) };
}

/** Every activity of the rollout worker, as protocol/activities.ts declares them. */
export function createActivities(deps: RolloutDeps): RolloutActivities {
  const episodeDeps = { ...defaultEpisodeDeps(deps.cfg), ...deps };
  return {
    ...runActivities(deps),
    ...episodeActivities(episodeDeps),
    ...sftActivities(episodeDeps),
  };
}

export type { RolloutActivities };
