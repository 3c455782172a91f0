// The arithmetic environment's synthetic dataset: small multi-step calculations with whole-number
// answers, text only. Seeded: the same seed gives the same rows. A few shapes, each two or three
// operations, so that a calculator call per step and a final submit is a natural episode.
import { seededRandom } from '../prompt-order.js';

export interface ArithmeticProblem {
  id: string;
  problem: string;
  answer: string;
}

type Int = (lo: number, hi: number) => number;

const SHAPES: Array<(int: Int) => { problem: string; value: number }> = [
  (int) => {
    const [a, b, c, d] = [int(2, 30), int(2, 30), int(2, 9), int(1, 50)];
    return { problem: `Compute (${a} + ${b}) * ${c} - ${d}.`, value: (a + b) * c - d };
  },
  (int) => {
    const [a, b, c, d] = [int(2, 15), int(2, 12), int(2, 15), int(2, 12)];
    return { problem: `Compute ${a} * ${b} + ${c} * ${d}.`, value: a * b + c * d };
  },
  (int) => {
    const a = int(10, 40);
    const [b, c, d] = [int(1, a - 1), int(1, 12), int(1, 12)];
    return { problem: `Compute (${a} - ${b}) * (${c} + ${d}).`, value: (a - b) * (c + d) };
  },
  (int) => {
    // (a + b) a multiple of d, so the quotient is whole
    const [d, k, c] = [int(2, 6), int(2, 9), int(2, 9)];
    const a = int(1, k * d - 1);
    return { problem: `Compute (${a} + ${k * d - a}) * ${c} / ${d}.`, value: k * c };
  },
  (int) => {
    const [trays, perTray, bag] = [int(3, 12), int(3, 12), int(2, 6)];
    const bags = int(1, Math.floor((trays * perTray - 1) / bag));
    const sold = trays * perTray - bags * bag;
    return {
      problem: `A baker bakes ${trays} trays of ${perTray} rolls, sells ${sold} rolls, and packs the rest into bags of ${bag}. How many bags does the baker fill?`,
      value: bags,
    };
  },
];

export function arithmeticProblems(n: number, seed: number): ArithmeticProblem[] {
  const r = seededRandom(seed);
  const int: Int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
  return Array.from({ length: n }, (_, i) => {
    const { problem, value } = SHAPES[int(0, SHAPES.length - 1)]!(int);
    return { id: `arith-${seed}-${i}`, problem, answer: String(value) };
  });
}
