// Every workflow the rollout worker runs (bundled by the worker; must stay deterministic).
export { episode } from './episode.js';
export { trainingRun } from './training-run.js';
