// Table tests of the default math RM: extraction, normalisation, equivalence, tolerance, bad input.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { extractBoxed, gradeAnswer, LabelError, scoreResponse, type GradeOptions } from '../../lib/math/reward.js';
import { REWARD_CASES } from '../../testing/reward-cases.js';

let total = 0;
for (const [group, cases] of REWARD_CASES) {
  total += cases.length;
  test(`RM table: ${group} (${cases.length} cases)`, () => {
    const wrong: string[] = [];
    for (const [response, label, want, opt] of cases) {
      const opts: GradeOptions = typeof opt === 'number' ? { tolerance: opt } : (opt ?? {});
      const got = scoreResponse(response, label, opts);
      assert.equal(typeof got.reason, 'string');
      if (got.reward !== want)
        wrong.push(
          `${JSON.stringify(response)} vs ${label} ${JSON.stringify(opts)}: got ${got.reward} (${got.reason})`,
        );
    }
    assert.deepEqual(wrong, []);
  });
}

test('RM table has at least 150 cases', () => {
  console.log(`reward table cases: ${total}`);
  assert.ok(total >= 150, `${total} cases`);
});

test('extractBoxed: last box, brace-matched, null when none or unclosed', () => {
  assert.equal(extractBoxed('a \\boxed{\\frac{1}{2}} b'), '\\frac{1}{2}');
  assert.equal(extractBoxed('\\boxed{1} \\fbox{2}'), '2');
  assert.equal(extractBoxed('\\boxed{1'), null);
  assert.equal(extractBoxed('nothing'), null);
  assert.equal(extractBoxed('\\boxed{a\\{b}'), 'a\\{b');
});

test('scoreResponse reports extracted text and a reason', () => {
  const s = scoreResponse('so \\boxed{5\\sqrt{3}}', '5*sqrt(3)');
  assert.deepEqual([s.reward, s.extracted], [1, '5\\sqrt{3}']);
  assert.match(scoreResponse('\\boxed{4', '4').reason, /unclosed/);
  assert.match(scoreResponse('4', '4').reason, /no \\boxed/);
});

test('gradeAnswer compares an already-extracted answer (calc_score argument)', () => {
  assert.equal(gradeAnswer('5\\sqrt{3}', '5*sqrt(3)').reward, 1);
  assert.equal(gradeAnswer('$\\frac{13\\pi}{9}$', '13*pi/9').reward, 1);
  assert.equal(gradeAnswer('', '1').reward, 0);
  assert.equal(gradeAnswer('\\boxed{5\\sqrt{3}}', '5*sqrt(3)').reward, 1);
  assert.equal(gradeAnswer('\\boxed{1} + \\boxed{2}', '2').reward, 0);
  assert.equal(gradeAnswer(undefined as unknown as string, '1').reward, 0);
  assert.equal(gradeAnswer('1', '1', { tolerance: Number.NaN }).reward, 1);
});

test('a label that cannot be graded against is a LabelError, never a 0 that blames the answer', () => {
  for (const label of ['', '   ', '$ $', '\\boxed{}', null, undefined, 5])
    assert.throws(() => gradeAnswer('5', label as unknown as string), LabelError, JSON.stringify(label));
  assert.throws(() => scoreResponse('\\boxed{5}', ''), /label is empty/);
  assert.throws(() => scoreResponse('no box at all', ''), LabelError);
});

test('deep nesting under the length limit is refused with a reason, never a stack overflow', () => {
  for (const depth of [51, 120, 300, 500, 999]) {
    for (const [open, close] of [
      ['(', ')'],
      ['{', '}'],
      ['\\sqrt{', '}'],
      ['\\frac{1}{', '}'],
    ]) {
      const text = `\\boxed{${open!.repeat(depth)}1${close!.repeat(depth)}}`;
      const s = scoreResponse(text, '1');
      assert.equal(s.reward, 0, `${open} × ${depth}`);
      const underLengthLimit = text.length - '\\boxed{}'.length <= 2000;
      assert.match(
        s.reason,
        underLengthLimit ? /nested \d+ deep|nested more than 50/ : /longer than \d+ chars/,
        `${open} × ${depth}: ${s.reason}`,
      );
      assert.doesNotMatch(s.reason, /call stack/);
    }
  }
  // up to the limit the answer is graded as usual
  assert.equal(scoreResponse(`\\boxed{${'('.repeat(50)}1${')'.repeat(50)}}`, '1').reward, 1);
  assert.equal(scoreResponse(`\\boxed{${'\\frac{1}{'.repeat(25)}1${'}'.repeat(25)}}`, '1').reward, 1);
  assert.equal(scoreResponse(`\\boxed{${'\\sqrt{'.repeat(50)}1${'}'.repeat(50)}}`, '1').reward, 1);
});

test('very long and adversarial input stays fast and never throws', () => {
  const inputs = [
    `${'x'.repeat(2_000_000)}\\boxed{5}`,
    `\\boxed{${'{'.repeat(200_000)}`,
    '\\boxed{'.repeat(100_000),
    `\\boxed{${'('.repeat(1500)}1${')'.repeat(1500)}}`,
    `\\boxed{${'\\frac{'.repeat(3000)}}`,
    `\\boxed{${'1+'.repeat(10_000)}1}`,
    `\\boxed{${'\\sqrt{'.repeat(600)}2${'}'.repeat(600)}}`,
    `\\boxed{${'9'.repeat(5000)}}`,
    '\\boxed{1e999999}',
    '\\boxed{\0}',
  ];
  const t0 = performance.now();
  for (const text of inputs) {
    const s = scoreResponse(text, '5');
    assert.ok(s.reward === 0 || s.reward === 1);
  }
  assert.equal(scoreResponse(inputs[0]!, '5').reward, 1);
  const ms = performance.now() - t0;
  assert.ok(ms < 3000, `took ${ms} ms`);
});
