// The tests' workflow bundle: every production workflow (workflows/index.ts) and the test-only ones.
export * from '../../workflows/index.js';
export { roundTrip } from './round-trip.js';
export { waitForMarker } from './wait-for-marker.js';
