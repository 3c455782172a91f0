// Every answer of the Geo3K test split (test.jsonl), rewritten in LaTeX, must score 1 against its label,
// and a perturbed value must score 0. Skips (with a message) when the data is absent.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { all, create } from 'mathjs';
import { REPO_ROOT } from '../../base/paths.js';
import { scoreResponse } from '../../lib/math/reward.js';
import { labelToLatex } from '../../lib/math/to-latex.js';

const GEO3K_TEST = path.join(
  process.env.TEMPO_RL_GEO3K_DIR ?? path.resolve(REPO_ROOT, '..', 'shared', 'data', 'geo3k'),
  'test.jsonl',
);
const math = create(all!, { number: 'number' });

function perturbed(label: string): string {
  const letters = /^\((.*)\)$/.exec(label)?.[1]?.split(',');
  if (letters && letters.length > 1 && letters.every((l) => /^'.*'$/.test(l.trim()))) {
    const swapped = [...letters.slice(0, -2), letters[letters.length - 1]!, letters[letters.length - 2]!];
    return labelToLatex(`(${swapped.join(',')})`);
  }
  if (/^-?\d+(\.\d+)?$/.test(label)) return String(Number(label) + 1);
  return labelToLatex(math.parse(`(${label}) * 11/10`).toString());
}

test('geo3k test answers: LaTeX form scores 1, perturbed value scores 0', {
  skip: !existsSync(GEO3K_TEST) && `geo3k data not found at ${GEO3K_TEST} (set TEMPO_RL_GEO3K_DIR)`,
}, () => {
  const rows = readFileSync(GEO3K_TEST, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { id: string; answer: string });
  let ones = 0;
  let zeros = 0;
  const failures: string[] = [];
  for (const row of rows) {
    const good = scoreResponse(`Therefore the answer is $\\boxed{${labelToLatex(row.answer)}}$.`, row.answer);
    if (good.reward === 1) ones++;
    else failures.push(`${row.id} ${row.answer} as ${labelToLatex(row.answer)}: ${good.reason}`);
    const bad = scoreResponse(`Therefore the answer is $\\boxed{${perturbed(row.answer)}}$.`, row.answer);
    if (bad.reward === 0) zeros++;
    else failures.push(`${row.id} ${row.answer} perturbed ${perturbed(row.answer)} scored 1: ${bad.reason}`);
  }
  console.log(`geo3k rows: ${rows.length}; LaTeX form scored 1: ${ones}; perturbed scored 0: ${zeros}`);
  assert.deepEqual(failures, []);
  assert.equal(ones, rows.length);
  assert.equal(zeros, rows.length);
});
