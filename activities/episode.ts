// The episode's activities (render, generate, env step, score, store) over their shared deps.
import type { TempoConfig } from '../config/schema.js';
import type { BlobStore } from '../stores/blobstore.js';
import { tinyModelDir } from '../base/paths.js';
import { envStep } from './env-step.js';
import type { EpisodeEngines } from './episode-engines.js';
import { generateActivities } from './generate.js';
import { loadImageProcessorSpec, renderActivities, type ImageProcessorSpec } from './render.js';
import { sampleActivities } from './sample.js';
import { scoreEpisode } from './score.js';
import { vllmEpisodeEngines } from './vllm-episode-engines.js';

export interface EpisodeDeps {
  /** Built on first use, so a worker without engines can still run other workflows. */
  engines: () => EpisodeEngines;
  imageProcessor: ImageProcessorSpec | null;
}

export function defaultEpisodeDeps(cfg: TempoConfig): EpisodeDeps {
  let engines: EpisodeEngines | null = null;
  return {
    engines: () => (engines ??= vllmEpisodeEngines(cfg)),
    imageProcessor: loadImageProcessorSpec(cfg.model.path || tinyModelDir()),
  };
}

export function episodeActivities(deps: EpisodeDeps & { store: BlobStore }) {
  return {
    ...renderActivities(deps),
    ...generateActivities(deps),
    ...sampleActivities(deps),
    envStep,
    scoreEpisode,
  };
}
