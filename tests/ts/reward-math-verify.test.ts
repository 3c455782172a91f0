// math-verify (the Python environments' grader: workers/environments/tempo_rl_geo3k/grade.py) beside
// the exact math RM (lib/math), on the exact RM's own table of cases with its default options (the
// tolerance and rounded cases are options math-verify does not have). Where they differ is recorded
// here, so a new release of either shows up as a changed list.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { scoreResponse } from '../../lib/math/reward.js';
import { envPythonBin, REPO_ROOT } from '../../base/paths.js';
import { REWARD_CASES } from '../../testing/reward-cases.js';

test('math-verify against the exact math RM on the RM table (default options)', () => {
  const cases = REWARD_CASES.flatMap(([group, list]) =>
    list
      .filter(([, , , opt]) => opt === undefined)
      .map(([response, label, want]) => ({ group, response, label, want })),
  );
  const out = execFileSync(envPythonBin(), ['-m', 'tempo_rl_geo3k', '--grade'], {
    input: cases.map((c) => JSON.stringify({ answer: c.response, label: c.label })).join('\n'),
    cwd: REPO_ROOT,
    env: { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers', 'environments') },
    encoding: 'utf8',
    maxBuffer: 1 << 24,
  });
  const mv = out
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { reward: number }).reward);
  assert.equal(mv.length, cases.length);
  const differ = cases
    .map((c, i) => ({ ...c, exact: scoreResponse(c.response, c.label).reward, math_verify: mv[i] }))
    .filter((c) => c.exact !== c.math_verify);
  for (const c of cases.map((c) => c)) assert.equal(scoreResponse(c.response, c.label).reward, c.want);
  const agree = cases.length - differ.length;
  process.stdout.write(
    `math-verify agrees with the exact RM on ${agree}/${cases.length} cases; differs on:\n${differ
      .map(
        (d) =>
          `  [${d.group}] ${JSON.stringify(d.response)} vs ${JSON.stringify(d.label)}: exact ${d.exact}, math-verify ${d.math_verify}`,
      )
      .join('\n')}\n`,
  );
  assert.deepEqual(
    differ.map((d) => [d.response, d.label, d.math_verify]),
    KNOWN_DIFFERENCES,
  );
});

/** [response, label, math-verify's reward] where math-verify 0.9.0 and the exact RM differ. */
const KNOWN_DIFFERENCES: Array<[string, string, number]> = [
  ['\\boxed{3} and \\fbox{7}', '7', 0],
  ['\\boxed{\\frac{1}{2}', '1/2', 1],
  ['\\boxed{9} and later \\boxed{', '9', 1],
  ['text \\boxed{\\text{12 cm}}', '12', 0],
  ['\\boxed{12}\\boxed{13}', '13', 0],
  ['\\boxed{Answer: 12}', '12', 0],
  ['The answer is \\boxed{12 units^2}.', '12', 0],
  ['The answer is \\boxed{30°}.', '30', 0],
  ['The answer is \\boxed{30\\degree}.', '30', 0],
  ['The answer is \\boxed{5√3}.', '5*sqrt(3)', 0],
  ['The answer is \\boxed{8\\sqrt{10-2\\sqrt{5}}}.', '8*sqrt(10-2*sqrt(5))', 0],
  ['The answer is \\boxed{13pi/9}.', '13*pi/9', 0],
  ['The answer is \\boxed{5.}.', '5', 0],
  ['The answer is \\boxed{1{,}000}.', '1000', 1],
  ['The answer is \\boxed{1e3}.', '1000', 0],
  ['The answer is \\boxed{8.660254}.', '5*sqrt(3)', 1],
  ['The answer is \\boxed{8.660254037844386}.', '5*sqrt(3)', 1],
  ['The answer is \\boxed{0.3333333333333333}.', '1/3', 1],
  ['The answer is \\boxed{10^{10^{20}}}.', '10^(10^20)', 1],
  ['The answer is \\boxed{1e999}.', '10^999', 0],
  ['The answer is \\boxed{x = 1,000}.', '1000', 0],
  ['The answer is \\boxed{(\\frac{1}{2}, \\sqrt{3})}.', '(1/2, sqrt(3))', 0],
  ['The answer is \\boxed{5!}.', '120', 1],
];
