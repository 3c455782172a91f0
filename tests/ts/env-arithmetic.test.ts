// The arithmetic environment: its calculator, its steps and the state they keep (`ans`, the calls),
// its text-only rows and prompt, and its seeded synthetic dataset.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { envStep } from '../../activities/env-step.js';
import { ConfigError, loadConfig } from '../../config/load.js';
import { DatasetConfig } from '../../config/schema.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { loadDataset } from '../../lib/data/load.js';
import { arithmeticProblems } from '../../lib/data/synth-arithmetic.js';
import { arithmeticStep, EnvInputError, getEnvironment } from '../../lib/env/index.js';
import type { ArithmeticState } from '../../lib/env/arithmetic-environment.js';
import { evaluate, formatValue } from '../../lib/env/calculator.js';
import { initialRunState } from '../../config/run-plan.js';

const calc = (expression: string) =>
  `<tool_call>{"name": "calculator", "arguments": {"expression": ${JSON.stringify(expression)}}}</tool_call>`;
const submit = (answer: unknown) =>
  `<tool_call>{"name": "submit", "arguments": {"answer": ${JSON.stringify(answer)}}}</tool_call>`;
const fresh = (): ArithmeticState => ({ calls: [], ans: null });
const step = (text: string, state = fresh(), turn = 1, max_turns = 4, label = '44') =>
  arithmeticStep(state, { text, label, turn, max_turns });
const env = getEnvironment('arithmetic');
const row = { id: 'a', problem: 'Compute (14 + 9) * 3 - 25.', answer: '44', images: [] };

test('calculator: precedence, parentheses, unary minus, ans; errors are messages, never throws', () => {
  const v = (e: string, ans: number | null = null) => {
    const r = evaluate(e, ans);
    return r.error ?? formatValue(r.value);
  };
  assert.equal(v('(14 + 9) * 3 - 25'), '44');
  assert.equal(v('2 + 3 * 4 - 6 / 3'), '12');
  assert.equal(v('-(-3) * 2'), '6');
  assert.equal(v('7 ÷ 2 × 4'), '14');
  assert.equal(v('ans / 4', 44), '11');
  assert.equal(v('1 / 3'), '0.333333333333');
  assert.equal(v('0.1 + 0.2'), '0.3');
  assert.equal(v('1 / 0'), 'division by zero');
  assert.equal(v('ans + 1'), 'ans is not set yet (no earlier result)');
  assert.equal(v('2 x 3'), 'unexpected "x" at position 3');
  assert.equal(v('3 4'), 'unexpected number at position 3');
  assert.equal(v('(1 + 2'), 'expected ")" at the end');
  assert.equal(v(''), 'empty expression');
  assert.match(v(`${'1+'.repeat(150)}1`), /longer than 200/);
  for (const e of ['((((', ')', '+', '1e309', 'ans ans', '*'.repeat(200), 'process.exit()'])
    assert.doesNotThrow(() => evaluate(e, 1));
});

test('a calculator call answers with its value and keeps it as ans in the state; the next call uses it', () => {
  const first = step(`First the sum. ${calc('(14 + 9) * 3')}`);
  assert.deepEqual([first.result.done, first.result.score, first.result.reason], [false, null, 'calculated']);
  assert.equal(first.result.observation, 'calculator: (14 + 9) * 3 = 69 (kept as ans)');
  assert.deepEqual(first.state, { calls: [{ expression: '(14 + 9) * 3', value: '69', error: null }], ans: 69 });
  const second = step(calc('ans - 25'), first.state, 2, 3);
  assert.match(second.result.observation!, /^calculator: ans - 25 = 44 \(kept as ans\) This is your last turn/);
  assert.equal(second.state.ans, 44);
  assert.equal(second.state.calls.length, 2);
  // the same turn from another state answers otherwise: the state is what the step reads
  assert.match(step(calc('ans - 25'), fresh(), 2).result.observation!, /calculator error: ans is not set yet/);
});

test('a calculator error is feedback and recorded; ans stays the last good result', () => {
  const r = step(calc('69 / 0'), { calls: [], ans: 5 });
  assert.deepEqual(
    [r.result.done, r.result.reason, r.result.observation],
    [false, 'calculator_error', 'calculator error: division by zero.'],
  );
  assert.deepEqual(r.state, { calls: [{ expression: '69 / 0', value: null, error: 'division by zero' }], ans: 5 });
});

test('submit ends the episode graded by the math RM; so does a turn with only a \\boxed{} answer', () => {
  const right = step(submit('44'));
  assert.deepEqual(
    [right.result.done, right.result.score, right.result.final_answer, right.result.reason],
    [true, 1, '44', 'correct'],
  );
  assert.deepEqual(right.result.tool_call, { name: 'submit', answer: '44', error: null });
  assert.deepEqual([step(submit(44.0)).result.score, step(submit('88/2')).result.score], [1, 1]);
  const wrong = step(submit('45'));
  assert.deepEqual([wrong.result.done, wrong.result.score, wrong.result.reason], [true, 0, 'wrong']);
  const boxed = step('so the answer is \\boxed{44}');
  assert.deepEqual(
    [boxed.result.done, boxed.result.score, boxed.result.final_answer, boxed.result.reason],
    [true, 1, '44', 'no_tool_call'],
  );
  const nothing = step('I give up.\n44');
  assert.deepEqual(
    [nothing.result.done, nothing.result.score, nothing.result.final_answer],
    [true, 0, null],
    'only \\boxed{} or submit counts, not a last line',
  );
});

test('tool errors name the tools and how to call them; out of turns the episode ends on its \\boxed{}', () => {
  for (const [text, re] of [
    ['<tool_call>{"name": "calc_score", "arguments": {"answer": "44"}}</tool_call>', /unknown tool "calc_score"/],
    ['<tool_call>{"name": "calculator", "arguments": {}}</tool_call>', /no "expression" argument/],
    ['<tool_call>{"name": "submit", "arguments": {"expression": "44"}}</tool_call>', /no "answer" argument/],
    ['<tool_call>{bad json</tool_call>', /invalid JSON/],
  ] as const) {
    const r = step(text);
    assert.deepEqual([r.result.done, r.result.score, r.result.reason], [false, null, 'tool_error'], text);
    assert.match(r.result.observation!, re);
    assert.match(r.result.observation!, /The tools are calculator, called as <tool_call>.*and submit, called as/);
  }
  const last = step(`\\boxed{44} ${calc('1 + 1')}`, fresh(), 4, 4);
  assert.deepEqual(
    [last.result.done, last.result.score, last.result.final_answer, last.result.reason],
    [true, 1, '44', 'out_of_turns'],
  );
  assert.equal(last.state.ans, 2, 'the last call is still recorded');
  assert.equal(step('<tool_call>{bad', fresh(), 4, 4).result.reason, 'tool_error_out_of_turns');
});

test("input that is not the model's doing is an EnvInputError; garbage never throws", () => {
  assert.throws(
    () => step(submit('1'), fresh(), 1, 3, ''),
    (err: Error) => err instanceof EnvInputError && /label is empty/.test(err.message),
  );
  assert.throws(() => step(submit('1'), fresh(), 5, 3), EnvInputError);
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

test('through the envStep activity: the state goes out and back in; a state of another shape fails without retries', async () => {
  const base = { environment: 'arithmetic', label: '44', max_turns: 3 };
  const one = await envStep({ ...base, text: calc('(14 + 9) * 3'), turn: 1, state: env.initialState(row) });
  assert.deepEqual(one.state, { calls: [{ expression: '(14 + 9) * 3', value: '69', error: null }], ans: 69 });
  const two = await envStep({ ...base, text: calc('ans - 25'), turn: 2, state: one.state });
  assert.match(two.observation!, /= 44/);
  const three = await envStep({ ...base, text: submit('44'), turn: 3, state: two.state });
  assert.deepEqual([three.done, three.score], [true, 1]);
  await assert.rejects(
    envStep({ ...base, text: submit('44'), turn: 1, state: {} }),
    (err: unknown) =>
      err instanceof ApplicationFailure &&
      err.nonRetryable &&
      err.type === 'InvalidEnvStepInput' &&
      /not a state of environment arithmetic/.test(err.message),
  );
});

test('text only: rows with an image are refused, the prompt has no image part, tools only with multi-turn', async () => {
  assert.equal(env.rowSchema.safeParse({ problem: 'Compute 1 + 1.', answer: 2 }).success, true);
  assert.equal(env.rowSchema.safeParse({ problem: 'Compute 1 + 1.', answer: '2', images: ['a.png'] }).success, false);
  assert.equal(env.rowSchema.safeParse({ problem: 'Compute 1 + 1.', answer: '2', image: 'a.png' }).success, false);
  const p = env.prompt(row, { tools: true });
  assert.equal(JSON.stringify(p.messages).includes('image'), false);
  assert.deepEqual(
    p.tools.map((t) => (t as { function: { name: string } }).function.name),
    ['calculator', 'submit'],
  );
  assert.match(String(p.messages[1]!.content), /^Compute \(14 \+ 9\) \* 3 - 25\.\n\n.*calculator/s);
  const single = env.prompt(row, { tools: false, systemPrompt: '' });
  assert.deepEqual([single.tools, single.messages.length], [[], 1]);
  assert.match(String(single.messages[0]!.content), /\\boxed\{\}/);
  assert.equal((await env.grade('44.0', '44', {})).reward, 1);
});

test('the synthetic dataset: seeded, whole-number answers the calculator agrees with, no images', async () => {
  const a = arithmeticProblems(50, 3);
  assert.deepEqual(a, arithmeticProblems(50, 3));
  assert.notDeepEqual(a, arithmeticProblems(50, 4));
  for (const p of a) {
    assert.match(p.answer, /^-?\d+$/);
    const expr = /^Compute (.*)\.$/.exec(p.problem)?.[1];
    if (expr) assert.equal(formatValue(evaluate(expr, null).value!), p.answer, p.problem);
  }
  const store = new LocalBlobStore(mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-arith-')));
  const cfg = DatasetConfig.parse({ kind: 'synthetic', synthetic_size: 8, synthetic_seed: 3 });
  const { rows } = await loadDataset(cfg, 'train', store, 'arithmetic');
  assert.deepEqual(
    rows.map((r) => r.id),
    a.slice(0, 8).map((p) => p.id),
  );
  assert.ok(rows.every((r) => r.images.length === 0));
  assert.equal((await loadDataset(cfg, 'eval', store, 'arithmetic')).rows.length, 4);
  // a Geo3K task for the arithmetic environment is refused, here and in the config
  await assert.rejects(
    loadDataset({ ...cfg, synthetic_task: 'measure' }, 'train', store, 'arithmetic'),
    /cannot take; its tasks: arithmetic/,
  );
  assert.throws(
    () => loadConfig({ env: {}, sets: ['rollout.environment=arithmetic', 'dataset.synthetic_task=measure'] }),
    (err: unknown) =>
      err instanceof ConfigError &&
      /dataset\.synthetic_task: makes rows that environment arithmetic \(rollout\.environment\) cannot take; its tasks: arithmetic/.test(
        err.message,
      ),
  );
});

test('a JSONL dataset for the arithmetic environment: a row with an image is skipped with the reason', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-arith-jsonl-'));
  const rows = [
    { id: 'a', problem: 'Compute 2 * 3.', answer: '6' },
    { id: 'b', problem: 'Compute 1 + 1.', answer: '2', images: ['x.png'] },
  ];
  writeFileSync(path.join(dir, 'train.jsonl'), rows.map((r) => JSON.stringify(r)).join('\n'));
  const store = new LocalBlobStore(path.join(dir, 'blobs'));
  const loaded = await loadDataset(
    DatasetConfig.parse({ kind: 'jsonl', path: path.join(dir, 'train.jsonl') }),
    'train',
    store,
    'arithmetic',
  );
  assert.deepEqual(loaded.rows, [{ id: 'a', problem: 'Compute 2 * 3.', answer: '6', images: [] }]);
  assert.deepEqual(loaded.skipped, [{ row: 2, reason: 'the row has an image, but the environment is text-only' }]);
});

test('rollout.environment=arithmetic: its stop strings in the plan, its synthetic task by default', () => {
  const cfg = loadConfig({ env: {}, sets: ['state_dir=/tmp/env-arith', 'rollout.environment=arithmetic'] });
  assert.equal(cfg.dataset.synthetic_task, undefined);
  const plan = initialRunState(cfg, 'r').plan;
  assert.deepEqual(
    [plan.episode.environment, plan.episode.stop, plan.eval_episode.environment],
    ['arithmetic', ['</tool_call>'], 'arithmetic'],
  );
});
