// Deterministic prompt selection: a seeded shuffle of the dataset per epoch and a cursor into it.
// Pure (used inside the trainingRun workflow), so a resumed run picks exactly the prompts it would
// have picked: none skipped, none repeated. rollout.prompt_order stratified deals the rows of each
// stratum (angle_facts: the figure kind) in turn instead, so that every step draws a balanced mix.

/** mulberry32: a small, well-known 32-bit PRNG; deterministic across platforms. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The seed of one epoch's order, shared by both orders (a run's seed and epoch pick it alone). */
function epochRandom(seed: number, epoch: number): () => number {
  return seededRandom((seed * 1_000_003 + epoch * 7919 + 1) >>> 0);
}

/** Fisher–Yates permutation of [0, size) for one epoch. */
export function epochPermutation(size: number, seed: number, epoch: number): number[] {
  const perm = Array.from({ length: size }, (_, i) => i);
  const next = epochRandom(seed, epoch);
  for (let i = size - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [perm[i], perm[j]] = [perm[j]!, perm[i]!];
  }
  return perm;
}

function shuffleInPlace<T>(xs: T[], next: () => number): void {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
}

/**
 * One epoch's order of [0, strata.length) where strata[i] is row i's stratum: each stratum's rows
 * shuffled, then dealt one per stratum a round, the strata in a new shuffled order each round (a
 * stratum that has run out sits the round out). With equal-sized strata every n_strata consecutive
 * picks of a round hold each stratum once, so a step's reward follows the policy, not which kinds of
 * problem it happened to draw (docs/tasks.md "Why the training reward rises, and why it once did not").
 */
export function stratifiedPermutation(strata: readonly number[], seed: number, epoch: number): number[] {
  const next = epochRandom(seed, epoch);
  const byStratum = new Map<number, number[]>();
  strata.forEach((s, i) => {
    const rows = byStratum.get(s);
    if (rows) rows.push(i);
    else byStratum.set(s, [i]);
  });
  // Ascending stratum ids: the order does not depend on which stratum the first row happens to hold.
  const groups = [...byStratum.keys()].sort((a, b) => a - b).map((s) => byStratum.get(s)!);
  for (const g of groups) shuffleInPlace(g, next);
  const perm: number[] = [];
  for (let round = 0; perm.length < strata.length; round++) {
    const dealing = groups.filter((g) => round < g.length);
    shuffleInPlace(dealing, next);
    for (const g of dealing) perm.push(g[round]!);
  }
  return perm;
}

/** The epoch's order: a plain shuffle, or with strata (one per row) the stratified deal. */
function orderOf(size: number, seed: number, epoch: number, strata?: readonly number[]): number[] {
  return strata ? stratifiedPermutation(strata, seed, epoch) : epochPermutation(size, seed, epoch);
}

export interface DataCursor {
  epoch: number;
  cursor: number;
}

/** The next `n` dataset indices from (epoch, cursor), rolling into the next epoch's order. `strata`
 *  (one per row: DatasetInfo.train_strata, present only for rollout.prompt_order stratified) picks the
 *  stratified order; without it the order is the plain shuffle every earlier run recorded. */
export function selectPrompts(
  size: number,
  seed: number,
  at: DataCursor,
  n: number,
  strata?: readonly number[],
): { indices: number[]; next: DataCursor } {
  if (size <= 0) throw new Error('the dataset is empty');
  if (strata && strata.length !== size)
    throw new Error(`the dataset has ${size} rows but ${strata.length} strata (one a row)`);
  const indices: number[] = [];
  let { epoch, cursor } = at;
  let perm = orderOf(size, seed, epoch, strata);
  while (indices.length < n) {
    if (cursor >= size) {
      epoch += 1;
      cursor = 0;
      perm = orderOf(size, seed, epoch, strata);
    }
    indices.push(perm[cursor]!);
    cursor += 1;
  }
  return { indices, next: { epoch, cursor } };
}
