// Every activity of the rollout worker. Activities that need shared state (config, blob store,
// engine pool) are built by a factory over `RolloutDeps` so tests can pass their own.
import type { TempoConfig } from '../config/schema.js';
import { LocalBlobStore } from '../lib/blobstore.js';
import { stateLayout } from '../lib/paths.js';
import { systemActivities } from './system.js';
import { runActivities } from './run.js';
import { episodeActivities, defaultEpisodeDeps, type EpisodeDeps } from './episode.js';
import { sftActivities } from './sft.js';

export interface RolloutDeps extends Partial<EpisodeDeps> {
  cfg: TempoConfig;
  store: LocalBlobStore;
}

export function rolloutDeps(cfg: TempoConfig): RolloutDeps {
  return { cfg, store: new LocalBlobStore(stateLayout(cfg.state_dir).blobs) };
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
