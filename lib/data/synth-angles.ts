// The demo's learnable task (docs/tasks.md): angles that the kind of figure fixes — an equilateral
// triangle's angle is 60, a square's corner 90, an isosceles right triangle's base angle 45, the
// other acute angle of a right triangle with a 60° angle 30, the base angle of an isosceles triangle
// with an 80° apex 50, a regular pentagon's central angle 72. Letters, wording and drawings vary; the
// answer depends only on the kind of figure, which the question names. A policy that guesses among
// the six answers succeeds 1 time in 6 on its first try; one that reads the question, every time.
import { label, svgDoc, type SyntheticProblem } from './synth-svg.js';

export const ANGLE_ANSWERS = ['30', '45', '50', '60', '72', '90'] as const;

const text = (x: number, y: number, t: string, color = 'red') => label(x, y, t, color);

type Pick = <T>(xs: readonly T[]) => T;
interface AngleKind {
  answer: (typeof ANGLE_ANSWERS)[number];
  make(l: string[], pick: Pick): { problem: string; svg: string };
}

const KINDS: AngleKind[] = [
  {
    answer: '60',
    make: ([a, b, c], pick) => ({
      problem: pick([
        `As shown in the diagram, triangle ${a}${b}${c} is equilateral. Find the measure of ∠${a}${b}${c}.`,
        `In the diagram, ${a}${b} = ${b}${c} = ${c}${a}. Find the measure of angle ${b}${c}${a} of the equilateral triangle.`,
      ]),
      svg: svgDoc(
        `<polygon points="60,200 260,200 160,27"/>${text(40, 215, a!)}${text(265, 215, b!)}${text(155, 20, c!)}`,
      ),
    }),
  },
  {
    answer: '90',
    make: ([a, b, c, d], pick) => ({
      problem: pick([
        `As shown in the diagram, ${a}${b}${c}${d} is a square. Find the measure of ∠${a}${b}${c}.`,
        `In the diagram, quadrilateral ${a}${b}${c}${d} is a square. Find the measure of angle ${b}${c}${d}.`,
      ]),
      svg: svgDoc(
        `<rect x="80" y="40" width="160" height="160"/>` +
          text(62, 38, a!) +
          text(245, 38, b!) +
          text(245, 215, c!) +
          text(62, 215, d!),
      ),
    }),
  },
  {
    answer: '45',
    make: ([a, b, c], pick) => ({
      problem: pick([
        `As shown in the diagram, triangle ${a}${b}${c} is an isosceles right triangle with the right angle at ${c}. Find the measure of ∠${c}${a}${b}.`,
        `In the diagram, ${c}${a} = ${c}${b} and ∠${a}${c}${b} = 90°. Find the measure of the isosceles right triangle's angle ${a}${b}${c}.`,
      ]),
      svg: svgDoc(
        `<polygon points="60,200 240,200 60,20"/><rect x="60" y="185" width="15" height="15"/>` +
          text(40, 215, c!) +
          text(245, 215, a!) +
          text(45, 18, b!),
      ),
    }),
  },
  {
    answer: '30',
    make: ([a, b, c], pick) => ({
      problem: pick([
        `As shown in the diagram, triangle ${a}${b}${c} has a right angle at ${c} and ∠${b}${a}${c} = 60°. Find the measure of ∠${a}${b}${c}.`,
        `In the diagram, ∠${a}${c}${b} = 90° and ∠${c}${a}${b} = 60° in the right triangle ${a}${b}${c}. Find the measure of angle ${c}${b}${a}.`,
      ]),
      svg: svgDoc(
        `<polygon points="60,200 160,200 60,27"/><rect x="60" y="185" width="15" height="15"/>` +
          text(40, 215, c!) +
          text(165, 215, a!) +
          text(45, 22, b!),
      ),
    }),
  },
  {
    answer: '50',
    make: ([a, b, c], pick) => ({
      problem: pick([
        `As shown in the diagram, ${a}${b} = ${a}${c} and ∠${b}${a}${c} = 80°. Find the measure of ∠${a}${b}${c}.`,
        `In the diagram, triangle ${a}${b}${c} is isosceles with ${a}${b} = ${a}${c} and apex angle ∠${c}${a}${b} = 80°. Find the measure of angle ${a}${c}${b}.`,
      ]),
      svg: svgDoc(
        `<polygon points="160,30 60,200 260,200"/>` +
          text(155, 22, a!) +
          text(40, 215, b!) +
          text(265, 215, c!) +
          text(150, 60, '80°', 'black'),
      ),
    }),
  },
  {
    answer: '72',
    make: ([a, b, c], pick) => ({
      problem: pick([
        `As shown in the diagram, ${a}${b}${c}DE is a regular pentagon with center O. Find the measure of ∠${a}O${b}.`,
        `In the diagram, O is the center of the regular pentagon ${a}${b}${c}DE. Find the measure of the central angle ${b}O${c}.`,
      ]),
      svg: svgDoc(
        `<polygon points="160,30 246,92 213,193 107,193 74,92"/><line x1="160" y1="120" x2="160" y2="30"/><line x1="160" y1="120" x2="246" y2="92"/>` +
          text(155, 22, a!) +
          text(250, 92, b!) +
          text(218, 210, c!) +
          text(95, 210, 'D') +
          text(55, 92, 'E') +
          text(150, 138, 'O'),
      ),
    }),
  },
];

// D, E and O name the pentagon's other vertices and its center.
const LETTERS = 'ABCFGHJKLMNPQRSTUVWXYZ'.split('');

/** The kind of each of `n` problems: every kind as often as the others (±1), in a seeded order. Drawn
 *  at random instead, one kind came up 15 times in 128 rows and another 26, and the warm start learnt
 *  the rare ones last (docs/tasks.md "Where the demo falls short"). */
export function angleKinds(n: number, int: (lo: number, hi: number) => number): number[] {
  const kinds = Array.from({ length: n }, (_, i) => i % KINDS.length);
  for (let i = n - 1; i > 0; i--) {
    const j = int(0, i);
    [kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!];
  }
  return kinds;
}

/** One angle-facts problem of kind `kind` (an index of angleKinds) from the generator's random source
 *  (same seed, same problem). */
export function angleProblem(kindIndex: number, int: (lo: number, hi: number) => number): Omit<SyntheticProblem, 'id'> {
  const pick: Pick = (xs) => xs[int(0, xs.length - 1)]!;
  const kind = KINDS[kindIndex]!;
  const letters = [...LETTERS];
  const chosen = Array.from({ length: 4 }, () => letters.splice(int(0, letters.length - 1), 1)[0]!);
  return { ...kind.make(chosen, pick), answer: kind.answer };
}
