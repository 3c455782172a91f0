// tempo-rl env geo3k-step: one environment step on stdin text, one JSON object on stdout.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { REPO_ROOT } from '../../base/paths.js';

const step = (text: string, args: string[]) => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', path.join(REPO_ROOT, 'cli', 'main.ts'), 'env', 'geo3k-step', ...args],
    { input: text, encoding: 'utf8', cwd: REPO_ROOT },
  );
  return { code: r.status, out: r.stdout, err: r.stderr };
};

test('a wrong tool call on turn 1 of 3 continues with feedback', () => {
  const r = step('<tool_call>{"name":"calc_score","arguments":{"answer":"7"}}</tool_call>', [
    '--label',
    '60',
    '--turn',
    '1',
    '--max-turns',
    '3',
    '--json',
  ]);
  assert.equal(r.code, 0, r.err);
  const j = JSON.parse(r.out);
  assert.deepEqual(
    [j.done, j.score, j.final_answer],
    [false, 0, null],
    'a wrong tool answer reports score 0, not null',
  );
  assert.match(j.observation, /incorrect/);
});

test('a correct tool call ends with score 1; no tool call scores the final \\boxed{}', () => {
  const ok = JSON.parse(
    step('<tool_call>{"name":"calc_score","arguments":{"answer":"60"}}</tool_call>', [
      '--label',
      '60',
      '--turn',
      '2',
      '--max-turns',
      '3',
      '--json',
    ]).out,
  );
  assert.deepEqual([ok.done, ok.score, ok.final_answer, ok.observation], [true, 1, '60', null]);
  const boxed = JSON.parse(step('so \\boxed{61}', ['--label', '60', '--turn', '1', '--max-turns', '3', '--json']).out);
  assert.deepEqual([boxed.done, boxed.score, boxed.final_answer], [true, 0, '61']);
});

test('bad flags exit 2 with a message naming the flag and its value', () => {
  const cases: Array<[string[], RegExp]> = [
    [['--label', '60', '--turn', '0', '--max-turns', '3'], /--turn must be a positive integer, got "0"/],
    [['--label', '60', '--turn', '4', '--max-turns', '3'], /--turn 4 is greater than --max-turns 3/],
    [['--label', '60', '--turn', '1.5', '--max-turns', '3'], /--turn must be a positive integer, got "1.5"/],
    [['--label', '60', '--turn', '1e0', '--max-turns', '3'], /--turn must be a positive integer, got "1e0"/],
    [['--label', '60', '--turn', '1', '--max-turns', 'three'], /--max-turns must be a positive integer, got "three"/],
    [['--label', '', '--turn', '1', '--max-turns', '3'], /--label: label is empty/],
    [
      ['--label', '60', '--turn', '1', '--max-turns', '3', '--tolerance', '-1'],
      /--tolerance must be a number ≥ 0, got "-1"/,
    ],
    [['--label', '60', '--turn', '1', '--max-turns', '3', '--match', 'fuzzy'], /--match.*fuzzy/],
  ];
  for (const [args, re] of cases) {
    const r = step('<tool_call>{"name":"calc_score","arguments":{"answer":"60"}}</tool_call>', args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.match(r.err, re);
    assert.equal(r.out, '');
  }
});
