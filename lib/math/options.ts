// How the default math RM matches an answer against its label (docs/reward.md). One place for the
// choices: the config schema, the CLI flags, the activities and the grader all read them here.

/**
 * exact (the default, as vime's math RM): equal values only; a decimal is the exact rational it
 * writes (0.5 is 1/2, 8.66 is 866/100, not 5√3). rounded: also accept a decimal that rounds the
 * other side to the places it shows (8.66 for 5√3, 8/15 for a label 0.53).
 */
export const REWARD_MATCHES = ['exact', 'rounded'] as const;
export type RewardMatch = (typeof REWARD_MATCHES)[number];

export interface GradeOptions {
  match?: RewardMatch;
  /** Absolute: also accept |answer − label| ≤ tolerance (vime's Geo3K RM). 0 (default): off. */
  tolerance?: number;
}

/** Options with defaults applied; a negative or non-finite tolerance counts as 0. */
export function resolveGradeOptions(opts: GradeOptions = {}): Required<GradeOptions> {
  const t = opts.tolerance;
  return {
    match: opts.match === 'rounded' ? 'rounded' : 'exact',
    tolerance: typeof t === 'number' && Number.isFinite(t) && t > 0 ? t : 0,
  };
}

/** A label that cannot be graded against (empty, not a string): a data error, never the model's fault. */
export class LabelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LabelError';
  }
}
