import assert from 'node:assert/strict';
import { test } from 'node:test';
import { finalAnswerOf, geo3kStep } from '../../lib/env/geo3k.js';
import { EnvInputError, getEnvironment, type EnvStepInput } from '../../lib/env/index.js';
import { lastToolCallBody, parseToolCall } from '../../lib/env/tool-call.js';

const call = (answer: unknown) =>
  `<tool_call>{"name":"calc_score","arguments":{"answer":${JSON.stringify(answer)}}}</tool_call>`;
const step = (text: string, turn = 1, max_turns = 3, label = '5*sqrt(3)') =>
  geo3kStep({ text, label, turn, max_turns });

test('a correct tool call ends the episode with reward 1', () => {
  const r = step(`Let me check.\n${call('\\sqrt{75}')}`);
  assert.deepEqual(
    { done: r.done, score: r.score, final: r.final_answer, obs: r.observation, reason: r.reason },
    { done: true, score: 1, final: '\\sqrt{75}', obs: null, reason: 'correct' },
  );
});

test('a wrong tool call gets feedback, then a last chance, then ends out of turns', () => {
  const first = step(call('7'), 1, 3);
  assert.equal(first.done, false);
  assert.equal(first.score, 0, 'a graded wrong answer scores 0, also while the episode continues');
  assert.match(first.observation!, /incorrect/);
  assert.doesNotMatch(first.observation!, /last chance/);
  const second = step(call('8'), 2, 3);
  assert.equal(second.reason, 'last_chance');
  assert.match(second.observation!, /last chance.*\\boxed/);
  const third = step(call('9'), 3, 3);
  assert.deepEqual([third.done, third.score, third.final_answer, third.reason], [true, 0, '9', 'out_of_turns']);
});

test('the last tool call of a turn counts', () => {
  const r = step(`${call('1')} no wait ${call('5\\sqrt{3}')}`);
  assert.equal(r.score, 1);
  assert.equal(r.final_answer, '5\\sqrt{3}');
});

test('function.name/arguments, JSON-string arguments and numeric answers are accepted', () => {
  assert.equal(
    step('<tool_call>{"function":{"name":"calc_score","arguments":{"answer":"60"}}}</tool_call>', 1, 3, '60').score,
    1,
  );
  assert.equal(
    step('<tool_call>{"name":"calc_score","arguments":"{\\"answer\\": \\"60\\"}"}</tool_call>', 1, 3, '60').score,
    1,
  );
  assert.equal(step('<tool_call>{"name":"calc_score","arguments":{"answer":60}}</tool_call>', 1, 3, '60').score, 1);
});

test('a call cut off by the stop string (no closing tag) is still read', () => {
  assert.equal(
    lastToolCallBody('x <tool_call>\n{"name":"calc_score","arguments":{"answer":"2"}}\n'),
    '{"name":"calc_score","arguments":{"answer":"2"}}',
  );
  assert.equal(step('<tool_call>{"name":"calc_score","arguments":{"answer":"60"}}', 1, 3, '60').done, true);
});

test('invalid JSON is a reported tool error, not a crash; on the last turn it falls back to the final answer', () => {
  const r = step('<tool_call>{"name": calc_score, </tool_call>');
  assert.equal(r.done, false);
  assert.equal(r.reason, 'tool_error');
  assert.match(r.observation!, /Tool error: invalid JSON/);
  assert.ok(r.tool_call?.error);
  const last = step('so \\boxed{5\\sqrt{3}} <tool_call>{bad</tool_call>', 3, 3);
  assert.deepEqual(
    [last.done, last.score, last.final_answer, last.reason],
    [true, 1, '5\\sqrt{3}', 'tool_error_out_of_turns'],
  );
  assert.match(parseToolCall('{"name":"calc_score","arguments":"{oops"}').error!, /arguments/);
  assert.match(parseToolCall('[1]').error!, /not a JSON object/);
  assert.match(parseToolCall('{"name":"calc_score","arguments":{}}').error!, /answer/);
});

test('an unknown tool is a tool error that names the one tool and how to call it', () => {
  const r = step('<tool_call>{"name":"search","arguments":{"answer":"1"}}</tool_call>');
  assert.equal(r.done, false);
  assert.equal(r.score, null);
  assert.match(r.observation!, /unknown tool "search"/);
  assert.match(r.observation!, /only tool is calc_score/);
  // with arguments calc_score does not take: still reported as the unknown tool, with the tool that exists
  const other = step('<tool_call>{"name":"search","arguments":{"query":"area"}}</tool_call>');
  assert.match(other.tool_call!.error!, /unknown tool "search"/);
  assert.match(
    other.observation!,
    /only tool is calc_score; call it as <tool_call>\{"name": "calc_score", "arguments": \{"answer": /,
  );
  // every tool error says which tool exists
  for (const bad of [
    '<tool_call>{bad</tool_call>',
    '<tool_call>{"arguments":{"answer":"1"}}</tool_call>',
    '<tool_call>{"name":"calc_score","arguments":{}}</tool_call>',
  ])
    assert.match(step(bad).observation!, /only tool is calc_score/, bad);
});

test("input that is not the model's doing is an EnvInputError, never a score", () => {
  const text = call('5');
  const cases: Array<[Partial<EnvStepInput>, RegExp]> = [
    [{ label: '' }, /label is empty/],
    [{ label: '   ' }, /label is empty/],
    [{ turn: 4, max_turns: 3 }, /turn.*greater than max_turns.*4/],
    [{ turn: 0 }, /turn/],
    [{ turn: 1.5 }, /turn/],
    [{ max_turns: 0, turn: 0 }, /turn|max_turns/],
    [{ tolerance: -1 }, /tolerance/],
    [{ match: 'fuzzy' as 'exact' }, /match/],
    [{ text: undefined as unknown as string }, /text/],
  ];
  for (const [patch, re] of cases) {
    const input = { text, label: '5', turn: 1, max_turns: 3, ...patch };
    assert.throws(
      () => geo3kStep(input),
      (err: Error) => err instanceof EnvInputError && re.test(err.message),
      JSON.stringify(patch),
    );
  }
});

test('the grader options reach the environment: exact by default, rounded and tolerance on request', () => {
  const text = call('8.66');
  assert.equal(step(text).score, 0);
  assert.equal(geo3kStep({ text, label: '5*sqrt(3)', turn: 1, max_turns: 3, match: 'rounded' }).score, 1);
  assert.equal(geo3kStep({ text, label: '5*sqrt(3)', turn: 1, max_turns: 3, tolerance: 0.01 }).score, 1);
  assert.equal(geo3kStep({ text, label: '5*sqrt(3)', turn: 1, max_turns: 3, tolerance: 0.0001 }).score, 0);
});

test('no tool call: the final \\boxed{} answer is scored and the episode ends', () => {
  const r = step('The area is \\boxed{60}.', 1, 3, '60');
  assert.deepEqual([r.done, r.score, r.final_answer, r.reason], [true, 1, '60', 'no_tool_call']);
  const wrong = step('so the answer is \\boxed{61}', 1, 3, '60');
  assert.deepEqual([wrong.done, wrong.score], [true, 0]);
});

test('no tool call and no \\boxed{}: the last non-empty line is the answer', () => {
  assert.equal(finalAnswerOf('thinking...\n60\n\n  '), '60');
  assert.equal(step('thinking\n60\n', 1, 3, '60').score, 1);
  const empty = step('   \n', 1, 3, '60');
  assert.deepEqual([empty.done, empty.score, empty.final_answer], [true, 0, null]);
});

test('garbage never throws', () => {
  for (const text of [
    '',
    '<tool_call>',
    '<tool_call></tool_call>',
    '\\boxed{',
    '<tool_call>null</tool_call>',
    'x'.repeat(100_000),
  ])
    assert.doesNotThrow(() => step(text));
});

test('environments are looked up by name', () => {
  assert.equal(getEnvironment('geo3k').name, 'geo3k');
  assert.throws(() => getEnvironment('nope'), /unknown environment/);
});
