// Every workflow the rollout worker runs (bundled by the worker; must stay deterministic).
export { roundTrip } from './round-trip.js';
export { waitForMarker } from './wait-for-signal.js';
export { episode } from './episode.js';
export { trainingRun } from './training-run.js';
