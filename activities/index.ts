// Every activity of the rollout worker. Activities that need shared state (config, blob store,
// engine pool) are built by a factory over `RolloutDeps` so tests can pass their own.
import type { TempoConfig } from '../config/schema.js';
import type { BlobStore } from '../lib/blobstore.js';
import { openConfiguredBlobStore } from '../lib/blob-store-config.js';
import { systemActivities } from './system.js';
import { runActivities } from './run.js';
import { episodeActivities, defaultEpisodeDeps, type EpisodeDeps } from './episode.js';
import { sftActivities } from './sft.js';

export interface RolloutDeps extends Partial<EpisodeDeps> {
  cfg: TempoConfig;
  store: BlobStore;
}

/** The production deps: the configured blob store (blobs.uri). */
export async function rolloutDeps(cfg: TempoConfig): Promise<RolloutDeps> {
  return { cfg, store: await openConfiguredBlobStore(cfg) };
}

export function createActivities(deps: RolloutDeps) {
  const episodeDeps = { ...defaultEpisodeDeps(deps.cfg), ...deps };
  return {
    ...systemActivities(deps),
    ...runActivities(deps),
    ...episodeActivities(episodeDeps),
    ...sftActivities(episodeDeps),
  };
}

export type RolloutActivities = ReturnType<typeof createActivities>;
