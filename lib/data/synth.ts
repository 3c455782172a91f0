// A synthetic geometry dataset with known answers, so the demo runs on a fresh machine without a
// download. Each problem is drawn as SVG and rasterised with sharp; the same seed gives the same rows.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import sharp from 'sharp';
import { writeOutputDir } from '../../base/out-path.js';
import { seededRandom as rng } from '../prompt-order.js';
import type { SyntheticTask } from './rows.js';
import { angleKinds, angleProblem } from './synth-angles.js';
import { label, type SyntheticProblem, svgDoc } from './synth-svg.js';

export type { SyntheticProblem };

/** √n as "k*sqrt(m)" with the square factor pulled out ("12" when n is a square). */
export function simplifiedSqrt(n: number): string {
  let outside = 1;
  let inside = n;
  for (let f = 2; f * f <= inside; f++) {
    while (inside % (f * f) === 0) {
      inside /= f * f;
      outside *= f;
    }
  }
  if (inside === 1) return String(outside);
  return outside === 1 ? `sqrt(${inside})` : `${outside}*sqrt(${inside})`;
}

type Maker = (r: () => number, int: (lo: number, hi: number) => number) => Omit<SyntheticProblem, 'id'>;

const MAKERS: Maker[] = [
  (_r, int) => {
    const a = int(3, 15);
    const b = int(3, 15);
    return {
      problem: `As shown in the diagram, triangle ABC has a right angle at C, AC=${a}, BC=${b}. Find the length of AB.`,
      answer: simplifiedSqrt(a * a + b * b),
      svg: svgDoc(
        `<polygon points="60,200 260,200 60,50"/><rect x="60" y="185" width="15" height="15"/>` +
          label(40, 215, 'C', 'red') +
          label(265, 215, 'B', 'red') +
          label(45, 45, 'A', 'red') +
          label(30, 130, String(a)) +
          label(150, 225, String(b)) +
          label(165, 115, '?'),
      ),
    };
  },
  (_r, int) => {
    const w = int(2, 20);
    const h = int(2, 20);
    return {
      problem: `As shown in the diagram, ABCD is a rectangle, AB=${w}, BC=${h}. Find the area of rectangle ABCD.`,
      answer: String(w * h),
      svg: svgDoc(
        `<rect x="50" y="50" width="220" height="140"/>` +
          label(35, 45, 'A', 'red') +
          label(275, 45, 'B', 'red') +
          label(275, 205, 'C', 'red') +
          label(35, 205, 'D', 'red') +
          label(150, 40, String(w)) +
          label(280, 125, String(h)),
      ),
    };
  },
  (_r, int) => {
    const radius = int(2, 12);
    const askArea = int(0, 1) === 1;
    return {
      problem: `As shown in the diagram, the radius of circle O is ${radius}. Find the ${askArea ? 'area' : 'circumference'} of circle O.`,
      answer: askArea ? `${radius * radius}*pi` : `${2 * radius}*pi`,
      svg: svgDoc(
        `<circle cx="160" cy="120" r="90"/><line x1="160" y1="120" x2="250" y2="120"/>` +
          label(145, 115, 'O', 'red') +
          label(195, 112, String(radius)),
      ),
    };
  },
  (_r, int) => {
    const a = int(20, 80);
    const b = int(20, 150 - a);
    return {
      problem: `As shown in the diagram, ∠ABC=${a}°, ∠BCA=${b}°. Find the measure of ∠CAB.`,
      answer: String(180 - a - b),
      svg: svgDoc(
        `<polygon points="40,200 280,200 130,50"/>` +
          label(25, 215, 'B', 'red') +
          label(285, 215, 'C', 'red') +
          label(125, 42, 'A', 'red') +
          label(70, 192, `${a}°`) +
          label(225, 192, `${b}°`) +
          label(122, 80, 'x'),
      ),
    };
  },
  (_r, int) => {
    const s = int(2, 14);
    return {
      problem: `As shown in the diagram, triangle ABC has a right angle at C, ∠BAC=30°, BC=${s}. Find the length of AC.`,
      answer: s === 1 ? 'sqrt(3)' : `${s}*sqrt(3)`,
      svg: svgDoc(
        `<polygon points="40,200 280,200 280,60"/><rect x="265" y="185" width="15" height="15"/>` +
          label(22, 215, 'A', 'red') +
          label(285, 215, 'C', 'red') +
          label(285, 55, 'B', 'red') +
          label(80, 192, '30°') +
          label(288, 135, String(s)) +
          label(160, 225, '?'),
      ),
    };
  },
];

/** The synthetic tasks drawn as figures (Geo3K's rows). */
export type GeometryTask = Extract<SyntheticTask, 'measure' | 'angle_facts'>;

export function syntheticProblems(n: number, seed: number, task: GeometryTask = 'measure'): SyntheticProblem[] {
  const r = rng(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
  const kinds = task === 'angle_facts' ? angleKinds(n, int) : [];
  return Array.from({ length: n }, (_, i) => {
    const problem = task === 'angle_facts' ? angleProblem(kinds[i]!, int) : MAKERS[int(0, MAKERS.length - 1)]!(r, int);
    return { id: `synth-${seed}-${i}`, ...problem, ...(task === 'angle_facts' ? { stratum: kinds[i]! } : {}) };
  });
}

export function rasterize(svg: string): Promise<Buffer> {
  return sharp(Buffer.from(svg)).png({ compressionLevel: 6 }).toBuffer();
}

/** The manifest `data synth` leaves in its folder: what it wrote, so --force replaces only that. */
export const SYNTH_MANIFEST = '.tempo-rl-synth.json';

/**
 * Writes train.jsonl (n rows), test.jsonl (max(4, n/4) rows, another seed) and images/ — the geo3k_dir
 * layout — into a new or empty folder; over an earlier synthetic dataset only with `force` (see
 * base/out-path.ts: the folder is replaced whole, so old images never mix with new ones).
 */
export async function writeSyntheticDataset(
  outDir: string,
  n: number,
  seed: number,
  opts: { force?: boolean } = {},
): Promise<{ train: number; test: number }> {
  const splits: Array<[string, SyntheticProblem[]]> = [
    ['train', syntheticProblems(n, seed)],
    ['test', syntheticProblems(Math.max(4, Math.ceil(n / 4)), seed + 1_000_003)],
  ];
  await writeOutputDir(outDir, { force: opts.force, manifestName: SYNTH_MANIFEST }, async (dir) => {
    await fs.mkdir(path.join(dir, 'images'));
    const files: string[] = [];
    for (const [split, problems] of splits) {
      const lines: string[] = [];
      for (const p of problems) {
        const rel = `images/${p.id}.png`;
        await fs.writeFile(path.join(dir, rel), await rasterize(p.svg));
        files.push(rel);
        lines.push(JSON.stringify({ id: p.id, split, problem: p.problem, answer: p.answer, images: [rel] }));
      }
      await fs.writeFile(path.join(dir, `${split}.jsonl`), `${lines.join('\n')}\n`);
      files.push(`${split}.jsonl`);
    }
    return { generator: 'tempo-rl data synth', n, seed, files };
  });
  return { train: splits[0]![1].length, test: splits[1]![1].length };
}
