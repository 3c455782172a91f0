// The vLLM client, its engine pool and helpers (docs/engines.md).
export * from './client.js';
export * from './capabilities.js';
export * from './errors.js';
export * from './metrics.js';
export * from './pool.js';
export * from './template.js';
export type * from './types.js';
export { MultiModalFeatures } from './schemas.js';
