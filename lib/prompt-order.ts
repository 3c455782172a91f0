// Deterministic prompt selection: a seeded shuffle of the dataset per epoch and a cursor into it.
// Pure (used inside the trainingRun workflow), so a resumed run picks exactly the prompts it would
// have picked: none skipped, none repeated.

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

/** Fisher–Yates permutation of [0, size) for one epoch. */
export function epochPermutation(size: number, seed: number, epoch: number): number[] {
  const perm = Array.from({ length: size }, (_, i) => i);
  const next = seededRandom((seed * 1_000_003 + epoch * 7919 + 1) >>> 0);
  for (let i = size - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [perm[i], perm[j]] = [perm[j]!, perm[i]!];
  }
  return perm;
}

export interface DataCursor {
  epoch: number;
  cursor: number;
}

/** The next `n` dataset indices from (epoch, cursor), rolling into the next epoch's order. */
export function selectPrompts(
  size: number,
  seed: number,
  at: DataCursor,
  n: number,
): { indices: number[]; next: DataCursor } {
  if (size <= 0) throw new Error('the dataset is empty');
  const indices: number[] = [];
  let { epoch, cursor } = at;
  let perm = epochPermutation(size, seed, epoch);
  while (indices.length < n) {
    if (cursor >= size) {
      epoch += 1;
      cursor = 0;
      perm = epochPermutation(size, seed, epoch);
    }
    indices.push(perm[cursor]!);
    cursor += 1;
  }
  return { indices, next: { epoch, cursor } };
}
