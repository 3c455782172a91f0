// Table tests of the default math RM: extraction, normalisation, equivalence, tolerance, bad input.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { extractBoxed, gradeAnswer, LabelError, scoreResponse, type GradeOptions } from '../../lib/math/reward.js';

const B = (s: string) => `The answer is \\boxed{${s}}.`;

// [response, label, expected reward, options? (a number: the absolute tolerance)]
type Case = [string, string, 0 | 1, (number | GradeOptions)?];

const extraction: Case[] = [
  ['so \\boxed{5\\sqrt{3}}', '5*sqrt(3)', 1],
  ['\\boxed{4} then corrected: \\boxed{5}', '5', 1],
  ['\\boxed{5} then corrected: \\boxed{4}', '5', 0],
  ['\\fbox{7}', '7', 1],
  ['\\boxed{3} and \\fbox{7}', '7', 1],
  ['\\fbox{3} and \\boxed{7}', '7', 1],
  ['\\boxed{\\frac{1}{2}}', '1/2', 1],
  ['\\boxed{{{12}}}', '12', 1],
  ['\\boxed 5', '5', 1],
  ['\\boxed{ 9 }', '9', 1],
  ['$\\boxed{9}$', '9', 1],
  ['\\[\\boxed{9}\\]', '9', 1],
  ['no box, just 9', '9', 0],
  ['', '9', 0],
  ['\\boxed{}', '9', 0],
  ['\\boxed{   }', '9', 0],
  ['\\boxed{9', '9', 0],
  ['\\boxed{\\frac{1}{2}', '1/2', 0],
  ['\\boxed{9} and later \\boxed{', '9', 0],
  ['\\boxedx{9}', '9', 0],
  ['\\boxed{\\{1, 2\\}}', '{1,2}', 1],
  ['\\boxed{a \\} b}', '9', 0],
  ['text \\boxed{\\text{12 cm}}', '12', 1],
  ['multi\nline\n\\boxed{\n12\n}', '12', 1],
  ['\\boxed{12}\\boxed{13}', '13', 1],
  ['}}}}\\boxed{12}{{{{', '12', 1],
  ['\\boxed{Answer: 12}', '12', 1],
  ['\\boxed{x = 12}', '12', 1],
  ['\\boxed{AB = 12}', '12', 1],
  ['\\boxed{m\\angle ABC = 30}', '30', 1],
];

const units: Case[] = [
  [B('12 cm'), '12', 1],
  [B('12\\text{ cm}'), '12', 1],
  [B('12 \\mathrm{cm}'), '12', 1],
  [B('12\\,\\text{cm}^2'), '12', 1],
  [B('12 square units'), '12', 1],
  [B('12 units^2'), '12', 1],
  [B('12 \\text{units}'), '12', 1],
  [B('12 inches'), '12', 1],
  [B('12 ft'), '12', 1],
  [B('12 m'), '12', 1],
  [B('12 meters'), '12', 1],
  [B('12cm'), '12', 1],
  [B('30^\\circ'), '30', 1],
  [B('30^{\\circ}'), '30', 1],
  [B('30°'), '30', 1],
  [B('30 degrees'), '30', 1],
  [B('30\\degree'), '30', 1],
  [B('30^\\circ'), '31', 0],
  [B('50\\%'), '50', 1],
  [B('50%'), '50', 1],
  [B('29.09^\\circ'), '180*acos(97/111)/pi', 0],
  [B('\\angle A = 30^\\circ'), '30', 1],
  [B('x = 45°'), '45', 1],
  [B('12\\text{ cm}'), '13', 0],
  [B('5\\sqrt{3}\\text{ cm}'), '5*sqrt(3)', 1],
  [B('10\\pi \\text{ cm}^2'), '10*pi', 1],
];

const fractions: Case[] = [
  [B('\\frac{3}{4}'), '3/4', 1],
  [B('\\dfrac{3}{4}'), '3/4', 1],
  [B('\\tfrac{3}{4}'), '3/4', 1],
  [B('\\frac34'), '3/4', 1],
  [B('3/4'), '3/4', 1],
  [B('0.75'), '3/4', 1],
  [B('\\frac{6}{8}'), '3/4', 1],
  [B('\\frac{4}{3}'), '3/4', 0],
  [B('\\frac{1}{3}'), '1/3', 1],
  [B('0.333'), '1/3', 0],
  [B('0.33'), '1/3', 0],
  [B('1/3'), '0.33', 0],
  [B('\\frac{15}{2}'), '15/2', 1],
  [B('7.5'), '15/2', 1],
  [B('7.50'), '15/2', 1],
  [B('\\frac{-15}{2}'), '-15/2', 1],
  [B('-\\frac{15}{2}'), '-15/2', 1],
  [B('\\frac{15}{-2}'), '-15/2', 1],
  [B('\\frac{\\frac{1}{2}}{2}'), '1/4', 1],
  [B('\\frac{8}{15}'), '0.53', 0],
  [B('0.5'), '0.53', 0],
  [B('\\frac{1357}{2}'), '1357/2', 1],
  [B('678.5'), '1357/2', 1],
  [B('\\frac{1}{2}'), '2', 0],
  [B('2\\frac{1}{2}'), '5/2', 1],
  [B('x^2\\frac{1}{2}'), 'x^2/2', 1],
];

const radicals: Case[] = [
  [B('5\\sqrt{3}'), '5*sqrt(3)', 1],
  [B('5 \\sqrt 3'), '5*sqrt(3)', 1],
  [B('5\\sqrt3'), '5*sqrt(3)', 1],
  [B('\\sqrt{75}'), '5*sqrt(3)', 1],
  [B('5*sqrt(3)'), '5*sqrt(3)', 1],
  [B('5sqrt(3)'), '5*sqrt(3)', 1],
  [B('5√3'), '5*sqrt(3)', 1],
  [B('8.66'), '5*sqrt(3)', 0],
  [B('8.7'), '5*sqrt(3)', 0],
  [B('8.67'), '5*sqrt(3)', 0],
  [B('3\\sqrt{5}'), '5*sqrt(3)', 0],
  [B('\\sqrt{3}'), '5*sqrt(3)', 0],
  [B('\\frac{5\\sqrt{3}}{2}'), '5*sqrt(3)/2', 1],
  [B('\\frac{5}{2}\\sqrt{3}'), '5*sqrt(3)/2', 1],
  [B('\\sqrt[3]{27}'), '3', 1],
  [B('\\sqrt{\\frac{1}{4}}'), '1/2', 1],
  [B('2\\sqrt{6}'), '2*sqrt(6)', 1],
  [B('\\sqrt{24}'), '2*sqrt(6)', 1],
  [B('1+\\sqrt{21}'), '1+sqrt(21)', 1],
  [B('\\sqrt{21}+1'), '1+sqrt(21)', 1],
  [B('\\sqrt{21}-1'), '1+sqrt(21)', 0],
  [B('-3+\\sqrt{109}'), '-3+sqrt(109)', 1],
  [B('30-3\\sqrt{7}'), '30-3*sqrt(7)', 1],
  [B('8\\sqrt{10-2\\sqrt{5}}'), '8*sqrt(10-2*sqrt(5))', 1],
  [B('\\frac{4\\sqrt{33}}{\\sqrt{\\pi}}'), '4*sqrt(33)/sqrt(pi)', 1],
  [B('\\sqrt{-4}'), '2', 0],
];

const pi: Case[] = [
  [B('\\frac{13\\pi}{9}'), '13*pi/9', 1],
  [B('\\frac{13}{9}\\pi'), '13*pi/9', 1],
  [B('13\\pi/9'), '13*pi/9', 1],
  [B('13pi/9'), '13*pi/9', 1],
  [B('4.54'), '13*pi/9', 0],
  [B('4.5'), '13*pi/9', 0],
  [B('10\\pi'), '10*pi', 1],
  [B('10π'), '10*pi', 1],
  [B('31.4'), '10*pi', 0],
  [B('31.5'), '10*pi', 0],
  [B('31.42'), '10*pi', 0],
  [B('\\pi + 24'), 'pi+24', 1],
  [B('24+\\pi'), 'pi+24', 1],
  [B('\\frac{\\pi}{3}'), 'pi/3', 1],
  [B('60'), 'pi/3', 0],
  [B('25\\pi - \\frac{25\\sqrt{3}}{2}'), '-25*sqrt(3)/2+25*pi', 1],
  [B('\\frac{465\\pi}{8}'), '465*pi/8', 1],
  [B('\\pi'), 'pi', 1],
  [B('3.14'), 'pi', 0],
  [B('3.1'), 'pi', 0],
  [B('3'), 'pi', 0],
];

const trig: Case[] = [
  [B('\\frac{180\\arccos(97/111)}{\\pi}'), '180*acos(97/111)/pi', 1],
  [B('\\cos^{-1}\\left(\\frac{97}{111}\\right)\\cdot\\frac{180}{\\pi}'), '180*acos(97/111)/pi', 1],
  [B('29.1'), '180*acos(97/111)/pi', 0],
  [B('29'), '180*acos(97/111)/pi', 0],
  [B('29.2'), '180*acos(97/111)/pi', 0],
  [B('9\\tan(28^\\circ)'), '9*tan(7*pi/45)', 0],
  [B('9\\tan\\left(\\frac{7\\pi}{45}\\right)'), '9*tan(7*pi/45)', 1],
  [B('4.79'), '9*tan(7*pi/45)', 0],
  [B('\\frac{15}{\\sin\\frac{\\pi}{9}}'), '15/sin(pi/9)', 1],
  [B('\\sin^{-1}(2/3) \\cdot 180/\\pi'), '180*asin(2/3)/pi', 1],
];

const decimalsAndSigns: Case[] = [
  [B('5.0'), '5', 1],
  [B('5.00'), '5', 1],
  [B('05'), '5', 1],
  [B('5.'), '5', 1],
  [B('+5'), '5', 1],
  [B('-5'), '5', 0],
  [B('-5'), '-5', 1],
  [B('−5'), '-5', 1],
  [B('- 5'), '-5', 1],
  [B('--5'), '5', 1],
  [B('5'), '-5', 0],
  [B('0'), '0', 1],
  [B('-0'), '0', 1],
  [B('0.0'), '0', 1],
  [B('1,000'), '1000', 1],
  [B('1{,}000'), '1000', 0],
  [B('1000.5'), '1000', 0],
  [B('2.5'), '2.5', 1],
  [B('2.50'), '2.5', 1],
  [B('2.49'), '2.5', 0],
  [B('2.5'), '5/2', 1],
  [B('1e3'), '1000', 1],
  [B('12.3'), '12.34', 0],
];

const tolerance: Case[] = [
  [B('0.53'), '8/15', 0],
  [B('0.53'), '8/15', 1, 0.01],
  [B('0.5'), '8/15', 0, 0.01],
  [B('8.6'), '5*sqrt(3)', 1, 0.1],
  [B('8.5'), '5*sqrt(3)', 0, 0.1],
  [B('100'), '101', 0, 0.01],
  [B('100'), '101', 1, 1],
  [B('100'), '102.5', 0, 0.01],
  [B('29'), '180*acos(97/111)/pi', 1, 0.1],
  [B('31'), '10*pi', 0, 0.02],
  [B('31'), '10*pi', 1, 0.5],
  [B('31'), '10*pi', 0, 0.001],
  [B('5'), '5', 1, 0.5],
  [B('-5'), '5', 0, 0.5],
  [B('\\frac{1}{3}'), '0.3', 0],
  [B('\\frac{1}{3}'), '0.3', 1, 0.05],
  [B('x'), '5', 0, 0.1],
];

// The old default, now opt-in (rollout.reward_match: rounded): each case above that scores 0 under
// exact only because the decimal is rounded scores 1 here; a wrong rounding still scores 0.
const R = { match: 'rounded' } as const;
const rounded: Case[] = [
  [B('29.09^\\circ'), '180*acos(97/111)/pi', 1, R],
  [B('0.333'), '1/3', 1, R],
  [B('1/3'), '0.33', 1, R],
  [B('\\frac{8}{15}'), '0.53', 1, R],
  [B('8.66'), '5*sqrt(3)', 1, R],
  [B('4.54'), '13*pi/9', 1, R],
  [B('31.4'), '10*pi', 1, R],
  [B('31.42'), '10*pi', 1, R],
  [B('3.14'), 'pi', 1, R],
  [B('29.1'), '180*acos(97/111)/pi', 1, R],
  [B('4.79'), '9*tan(7*pi/45)', 1, R],
  [B('(0.5, 1.732)'), '(1/2, sqrt(3))', 1, R],
  [B('8.67'), '5*sqrt(3)', 0, R],
  [B('8.7'), '5*sqrt(3)', 0, R],
  [B('0.33'), '1/3', 0, R],
  [B('0.5'), '0.53', 0, R],
  [B('3.1'), 'pi', 0, R],
  [B('31.5'), '10*pi', 0, R],
  [B('8.6'), '5*sqrt(3)', 1, { match: 'rounded', tolerance: 0.1 }],
];

// Exact equivalences vime's sympy check accepts stay 1 under the exact default; big and infinite
// values never overflow into equality.
const exact: Case[] = [
  [B('0.5'), '1/2', 1],
  [B('\\frac{1}{2}'), '0.5', 1],
  [B('7.5'), '15/2', 1],
  [B('0.75'), '3/4', 1],
  [B('0.125'), '1/8', 1],
  [B('5\\sqrt{3}'), '5*sqrt(3)', 1],
  [B('\\frac{13\\pi}{9}'), '13*pi/9', 1],
  [B('8.660254'), '5*sqrt(3)', 0],
  [B('8.660254037844386'), '5*sqrt(3)', 0],
  [B('0.3333333333333333'), '1/3', 0],
  [B('\\sin(\\pi)'), '0', 1],
  [B('\\sqrt{2}^2'), '2', 1],
  [B('10^{400}'), '10^400', 1],
  [B('10^{999}'), '10^400', 0],
  [B('10^{400}+1'), '10^400', 0],
  [B('2^{1000}'), '2^1000', 1],
  [B('\\infty'), '10^400', 0],
  [B('10^{400}'), 'Infinity', 0],
  [B('\\infty'), 'Infinity', 1],
  [B('-\\infty'), 'Infinity', 0],
  [B('10^{10^{20}}'), 'Infinity', 0],
  [B('10^{10^{20}}'), '10^(10^20)', 0],
  [B('\\frac{1}{0}'), 'Infinity', 0],
  [B('1e999'), '10^999', 1],
  [B('x = 3 \\text{ or } x = 4'), '4', 0],
  [B('x = 3 or x = 4'), '4', 0],
  [B('x=3, y=4'), '4', 0],
  [B('3 \\text{ or } 4'), '(3,4)', 1],
  [B('x = 1,000'), '1000', 1],
  [B('AB = 12 \\text{ cm}'), '12', 1],
];

const collections: Case[] = [
  [B('(1, 2)'), '(1,2)', 1],
  [B('(2, 1)'), '(1,2)', 0],
  [B('\\left(1, 2\\right)'), '(1,2)', 1],
  [B('(1, 2, 3)'), '(1,2)', 0],
  [B('[1, 2)'), '[1,2)', 1],
  [B('[1, 2]'), '[1,2)', 0],
  [B('(1, 2)'), '[1,2)', 0],
  [B('(-\\infty, 3]'), '(-Infinity,3]', 1],
  [B('1, 2'), '(1,2)', 1],
  [B('(\\frac{1}{2}, \\sqrt{3})'), '(1/2, sqrt(3))', 1],
  [B('(0.5, 1.732)'), '(1/2, sqrt(3))', 0],
  [B('\\{2, 1\\}'), '\\{1, 2\\}', 1],
  [B('\\{2, 3\\}'), '\\{1, 2\\}', 0],
  [B('D, A, E, B'), "('D','A','E','B')", 1],
  [B('(D, A, E, B)'), "('D','A','E','B')", 1],
  [B('(D, A, B, E)'), "('D','A','E','B')", 0],
  [B('5'), '(1,2)', 0],
  [B('(1, 2)'), '5', 0],
  [B('(1+2)'), '3', 1],
];

const malformed: Case[] = [
  [B('\\frac{1}'), '1', 0],
  [B('\\sqrt'), '1', 0],
  [B('\\foo{3}'), '3', 0],
  [B('1 +'), '1', 0],
  [B('((('), '1', 0],
  [B('import(1)'), '1', 0],
  [B('createUnit("x")'), '1', 0],
  [B('evaluate("1")'), '1', 0],
  [B('[1,2,3][1]'), '1', 0],
  [B('1 < 2'), '1', 0],
  [B('x'), '1', 0],
  [B('x+1'), '1+x', 1],
  [B('2x'), '2*x', 1],
  [B('x^2'), 'x*x', 1],
  [B('y'), 'x', 0],
  [B('\\infty'), '5', 0],
  [B('\\text{no solution}'), '5', 0],
  [B('\\pm 5'), '5', 0],
  [B('5!'), '120', 0],
  [B('\\\\'), '5', 0],
  [B('\\boxed{5}'), '5', 1],
  [B('abc'), 'abc', 1],
];

const all: Array<[string, Case[]]> = [
  ['extraction', extraction],
  ['units and degrees', units],
  ['fractions', fractions],
  ['radicals', radicals],
  ['pi', pi],
  ['trig labels', trig],
  ['decimals and signs', decimalsAndSigns],
  ['tolerance', tolerance],
  ['rounded (opt-in)', rounded],
  ['exact equivalences and huge values', exact],
  ['tuples, intervals, sets', collections],
  ['malformed answers', malformed],
];

let total = 0;
for (const [group, cases] of all) {
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
