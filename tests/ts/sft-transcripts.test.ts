// The angle-facts task and the SFT transcripts synthesised from it (pure: no engine, no server).
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { ANGLE_ANSWERS } from '../../lib/data/synth-angles.js';
import { syntheticProblems } from '../../lib/data/synth.js';
import { calcScoreCall, toolTranscripts } from '../../lib/data/transcripts.js';
import { geo3kStep } from '../../lib/env/geo3k.js';
import { lastToolCallBody, parseToolCall } from '../../lib/env/tool-call.js';
import type { PromptRow } from '../../lib/data/rows.js';

const store = new LocalBlobStore(mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-transcripts-')));
const rows: PromptRow[] = syntheticProblems(60, 3, 'angle_facts').map((p) => ({
  id: p.id,
  problem: p.problem,
  answer: p.answer,
  images: ['blob:cas/aa/x.png'],
}));

test('angle facts: seeded, six answers, each fixed by the kind of figure the question names', () => {
  assert.deepEqual(syntheticProblems(20, 3, 'angle_facts'), syntheticProblems(20, 3, 'angle_facts'));
  assert.notDeepEqual(syntheticProblems(20, 3, 'angle_facts'), syntheticProblems(20, 4, 'angle_facts'));
  const kinds: Array<[RegExp, string]> = [
    [/equilateral/, '60'],
    [/square/, '90'],
    [/isosceles right/, '45'],
    [/= 60°/, '30'],
    [/80°/, '50'],
    [/pentagon/, '72'],
  ];
  for (const r of rows) {
    const kind = kinds.find(([re]) => re.test(r.problem));
    assert.ok(kind, `a known kind: ${r.problem}`);
    assert.equal(r.answer, kind![1], r.problem);
  }
  assert.deepEqual([...new Set(rows.map((r) => r.answer))].sort(), [...ANGLE_ANSWERS].sort());
  // the measure task is unchanged by default
  assert.deepEqual(syntheticProblems(5, 1), syntheticProblems(5, 1, 'measure'));
});

test("a transcript: the episode prompt, calc_score calls, and the environment's own feedback", () => {
  const [t] = toolTranscripts([rows[0]!, ...rows.slice(1)], store, { max_turns: 3, first_correct: 0, seed: 1 });
  const msgs = t!.messages;
  assert.equal(msgs[0]!.role, 'system');
  assert.ok(msgs[1]!.content.startsWith('<image>'), 'the image placeholder where buildMessages puts the image');
  assert.equal(t!.images.length, 1);
  assert.equal((t!.tools as Array<{ function: { name: string } }>)[0]!.function.name, 'calc_score');
  const assistant = msgs
    .filter((m) => m.role === 'assistant')
    .map((m) => parseToolCall(lastToolCallBody(m.content)!).answer);
  assert.notEqual(assistant[0], rows[0]!.answer, 'first_correct 0: the first answer is wrong');
  assert.equal(new Set(assistant).size, assistant.length, 'no answer is tried twice');
  // each observation is exactly what the environment answers to the turn before it
  msgs.forEach((m, i) => {
    if (m.role !== 'user' || i < 3) return;
    const turn = msgs.slice(0, i).filter((x) => x.role === 'assistant').length;
    assert.equal(
      m.content,
      geo3kStep({ text: msgs[i - 1]!.content, label: rows[0]!.answer, turn, max_turns: 3 }).observation,
    );
  });
});

test('transcripts: right first with the given probability; otherwise wrong, then the feedback is used', () => {
  const all = toolTranscripts(rows, store, { max_turns: 2, first_correct: 0.4, seed: 7 });
  const firsts = all.map(
    (t, i) =>
      parseToolCall(lastToolCallBody(t.messages.find((m) => m.role === 'assistant')!.content)!).answer ===
      rows[i]!.answer,
  );
  const share = firsts.filter(Boolean).length / firsts.length;
  assert.ok(share > 0.2 && share < 0.6, `≈ 0.4 right first: ${share}`);
  for (const [i, t] of all.entries()) {
    const turns = t.messages.filter((m) => m.role === 'assistant');
    assert.equal(
      turns.length,
      firsts[i] ? 1 : 2,
      'a right first answer ends the transcript; a wrong one gets a second turn',
    );
  }
  assert.deepEqual(toolTranscripts(rows, store, { max_turns: 2, first_correct: 0.4, seed: 7 }), all, 'seeded');
  assert.equal(
    calcScoreCall('5\\sqrt{3}'),
    '<tool_call>\n{"name": "calc_score", "arguments": {"answer": "5\\\\sqrt{3}"}}\n</tool_call>',
  );
});

test('per_row: fresh answer draws for every copy of a row, unique ids, the right share of right first answers', () => {
  const perRow = 20;
  const ts = toolTranscripts(rows, store, { max_turns: 2, first_correct: 0.85, seed: 5, per_row: perRow });
  assert.equal(ts.length, rows.length * perRow);
  assert.equal(new Set(ts.map((t) => t.id)).size, ts.length, 'unique ids');
  assert.equal(ts[rows.length]!.id, `${rows[0]!.id}#1`, 'a pass over all rows at a time');
  const firstAnswer = (t: (typeof ts)[number]) =>
    parseToolCall(lastToolCallBody(t.messages.find((m) => m.role === 'assistant')!.content)!).answer;
  const right = ts.filter((t, i) => firstAnswer(t) === rows[i % rows.length]!.answer).length / ts.length;
  assert.ok(Math.abs(right - 0.85) < 0.04, `first answers right ${right}`);
  // the copies of one row do not all repeat the same wrong answer
  const wrongOfRow0 = ts.filter((t, i) => i % rows.length === 0 && firstAnswer(t) !== rows[0]!.answer).map(firstAnswer);
  assert.ok(new Set(wrongOfRow0).size > 1 || wrongOfRow0.length <= 1, `varied wrong answers: ${wrongOfRow0}`);
  assert.throws(
    () => toolTranscripts(rows, store, { max_turns: 2, seed: 5, per_row: 0 }),
    /per_row must be a positive integer, got 0/,
  );
});

test('habitual transcripts answer by habit whatever the figure, and after a wrong answer sometimes answer right; the others draw', () => {
  const ts = toolTranscripts(rows, store, {
    max_turns: 2,
    seed: 9,
    per_row: 10,
    first_correct: 1,
    habit: ['180', '360'],
    habit_share: 0.6,
    habit_recheck: 0.25,
  });
  const said = (c: string) => parseToolCall(lastToolCallBody(c)!).answer;
  let habitual = 0;
  let rechecks = 0;
  for (const [i, t] of ts.entries()) {
    const row = rows[i % rows.length]!;
    const turns = t.messages.filter((m) => m.role === 'assistant').map((m) => m.content);
    if (said(turns[0]!) !== '180') {
      assert.deepEqual(turns, [calcScoreCall(row.answer)], 'the others: first_correct 1, so one right answer');
      continue;
    }
    habitual += 1;
    assert.equal(turns.length, 2, 'the habit is right for no question here, so there is a second turn');
    if (said(turns[1]!) === row.answer) rechecks += 1;
    else assert.equal(turns[1], calcScoreCall('360'), 'else the next habit answer');
  }
  assert.ok(Math.abs(habitual / ts.length - 0.6) < 0.05, `≈ 0.6 habitual: ${habitual}/${ts.length}`);
  assert.ok(
    Math.abs(rechecks / habitual - 0.25) < 0.06,
    `≈ 0.25 right after the habit's wrong answer: ${rechecks}/${habitual}`,
  );
  // unset: the draws and the transcripts are those of before (no habit, no extra random draw)
  assert.deepEqual(
    toolTranscripts(rows, store, { max_turns: 2, first_correct: 0.4, seed: 7, habit_share: 0.5, habit_recheck: 0.5 }),
    toolTranscripts(rows, store, { max_turns: 2, first_correct: 0.4, seed: 7 }),
  );
  const all = toolTranscripts(rows, store, { max_turns: 2, seed: 3, habit: ['60', '90'] });
  for (const [i, t] of all.entries())
    assert.deepEqual(
      t.messages.filter((m) => m.role === 'assistant').map((m) => said(m.content)),
      rows[i]!.answer === '60' ? ['60'] : ['60', '90'],
      'habit_share defaults to 1',
    );
});

test('recheck: in the transcripts not by habit, a wrong first answer is followed by the right one at that rate', () => {
  const said = (c: string) => parseToolCall(lastToolCallBody(c)!).answer;
  const ts = toolTranscripts(rows, store, {
    max_turns: 2,
    seed: 4,
    per_row: 20,
    first_correct: 0.5,
    habit: ['180', '360'],
    habit_share: 0.5,
    habit_recheck: 0,
    recheck: 0.75,
  });
  let slips = 0;
  let rechecks = 0;
  for (const [i, t] of ts.entries()) {
    const row = rows[i % rows.length]!;
    const turns = t.messages.filter((m) => m.role === 'assistant').map((m) => said(m.content));
    if (turns[0] === '180') {
      assert.deepEqual(turns, ['180', '360'], 'the habitual ones keep their own recheck (0 here)');
      continue;
    }
    if (turns[0] === row.answer) continue;
    slips += 1;
    assert.equal(turns.length, 2);
    assert.notEqual(turns[1], turns[0], 'never the same wrong answer again');
    if (turns[1] === row.answer) rechecks += 1;
  }
  assert.ok(slips > 50, `enough wrong first answers to judge: ${slips}`);
  // the others draw among the untried answers, the right one included
  assert.ok(
    rechecks / slips > 0.72 && rechecks / slips < 0.88,
    `≈ 0.75 + 0.25 × a fair draw right after a wrong first answer: ${rechecks}/${slips}`,
  );
  const plain = toolTranscripts(rows, store, { max_turns: 2, seed: 4, per_row: 20, first_correct: 0.5, recheck: 1 });
  for (const [i, t] of plain.entries()) {
    const turns = t.messages.filter((m) => m.role === 'assistant').map((m) => said(m.content));
    assert.equal(turns[turns.length - 1], rows[i % rows.length]!.answer, 'recheck 1: always right by the second turn');
  }
});
