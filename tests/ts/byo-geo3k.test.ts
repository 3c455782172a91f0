// Geo3K written as a verifiers environment (workers/environments/tempo_rl_geo3k) against the
// TypeScript environment (lib/env/geo3k.ts): the same feedback, reasons, final answers and rewards
// on the Geo3K step's test cases (tests/ts/env-geo3k.test.ts). The Python environment's Env.run feeds
// exactly this step with each assistant turn (tests/ts/byo-verifiers.test.ts runs it through the
// worker). Only a JSON parser's own wording in "invalid JSON" feedback differs (masked here).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { geo3kStep } from '../../lib/env/geo3k.js';
import { envPythonBin, REPO_ROOT } from '../../base/paths.js';

const call = (answer: unknown) =>
  `<tool_call>{"name":"calc_score","arguments":{"answer":${JSON.stringify(answer)}}}</tool_call>`;

/** [text, turn, max_turns, label]: the step inputs of tests/ts/env-geo3k.test.ts. */
const CASES: Array<[string, number, number, string]> = [
  [`Let me check.\n${call('\\sqrt{75}')}`, 1, 3, '5*sqrt(3)'],
  [call('7'), 1, 3, '5*sqrt(3)'],
  [call('8'), 2, 3, '5*sqrt(3)'],
  [call('9'), 3, 3, '5*sqrt(3)'],
  [`${call('1')} no wait ${call('5\\sqrt{3}')}`, 1, 3, '5*sqrt(3)'],
  ['<tool_call>{"function":{"name":"calc_score","arguments":{"answer":"60"}}}</tool_call>', 1, 3, '60'],
  ['<tool_call>{"name":"calc_score","arguments":"{\\"answer\\": \\"60\\"}"}</tool_call>', 1, 3, '60'],
  ['<tool_call>{"name":"calc_score","arguments":{"answer":60}}</tool_call>', 1, 3, '60'],
  ['<tool_call>{"name":"calc_score","arguments":{"answer":"60"}}', 1, 3, '60'],
  ['<tool_call>{"name": calc_score, </tool_call>', 1, 3, '5*sqrt(3)'],
  ['so \\boxed{5\\sqrt{3}} <tool_call>{bad</tool_call>', 3, 3, '5*sqrt(3)'],
  ['<tool_call>{"name":"search","arguments":{"answer":"1"}}</tool_call>', 1, 3, '5*sqrt(3)'],
  ['<tool_call>{"name":"search","arguments":{"query":"area"}}</tool_call>', 1, 3, '5*sqrt(3)'],
  ['<tool_call>{bad</tool_call>', 1, 3, '5*sqrt(3)'],
  ['<tool_call>{"arguments":{"answer":"1"}}</tool_call>', 1, 3, '5*sqrt(3)'],
  ['<tool_call>{"name":"calc_score","arguments":{}}</tool_call>', 1, 3, '5*sqrt(3)'],
  ['<tool_call>{"name":"calc_score","arguments":"{oops"}</tool_call>', 2, 3, '5*sqrt(3)'],
  [call('8.66'), 1, 3, '5*sqrt(3)'],
  ['The area is \\boxed{60}.', 1, 3, '60'],
  ['so the answer is \\boxed{61}', 1, 3, '60'],
  ['thinking\n60\n', 1, 3, '60'],
  ['   \n', 1, 3, '60'],
  [call('60'), 2, 2, '60'],
  [call('59'), 1, 2, '60'],
];

/** The JSON parser's own wording after "invalid JSON in tool call[ arguments]:" differs by language. */
const masked = (s: string | null) =>
  s?.replace(/(invalid JSON in tool call(?: arguments)?): [^.]*(\.|$)/, '$1: …$2') ?? null;

test('Geo3K as a verifiers environment: the same feedback, reasons and rewards as the TypeScript step', () => {
  const input = CASES.map(([text, turn, max_turns, label]) => JSON.stringify({ text, turn, max_turns, label })).join(
    '\n',
  );
  const out = execFileSync(envPythonBin(), ['-m', 'tempo_rl_geo3k'], {
    input,
    cwd: REPO_ROOT,
    env: { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers', 'environments') },
    encoding: 'utf8',
  });
  const python = out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.equal(python.length, CASES.length);
  CASES.forEach(([text, turn, max_turns, label], i) => {
    const ts = geo3kStep({ text, turn, max_turns, label });
    const py = python[i];
    assert.deepEqual(
      { done: py.done, score: py.score, final: py.final_answer, reason: py.reason, obs: masked(py.observation) },
      { done: ts.done, score: ts.score, final: ts.final_answer, reason: ts.reason, obs: masked(ts.observation) },
      `case ${i}: ${text}`,
    );
  });
});
