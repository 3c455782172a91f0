import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  appendGenerated,
  appendObservation,
  checkInvariants,
  checkObservationSpecials,
  forbiddenResponseTokens,
  idsForText,
  maskedSpans,
  observationSuffix,
  remainingBudget,
  responseBudget,
  startTrajectory,
  TrajectoryError,
  VLLM_PLACEHOLDER_LOGPROB,
} from '../../lib/trajectory.js';

const EOT = 151645;
const EOS2 = 151643;
const tok = { eos_ids: [EOT, EOS2], end_of_turn_id: EOT };
const limits = { max_response_len: 20, max_context_len: 100 };
const gen = (ids: number[], finish = 'stop') => ({
  token_ids: ids,
  logprobs: ids.map((_, i) => -0.1 * (i + 1)),
  finish_reason: finish,
});

test('budget = min(max_response_len, max_context_len - prompt_len), never negative', () => {
  assert.equal(responseBudget(10, 20, 100), 20);
  assert.equal(responseBudget(90, 20, 100), 10);
  assert.equal(responseBudget(120, 20, 100), 0);
});

test('generated tokens get mask 1 and their logprobs; an EOS finish appends nothing', () => {
  const t = startTrajectory(5, limits);
  assert.equal(appendGenerated(t, gen([1, 2, EOT]), tok), null);
  assert.deepEqual(t.response_ids, [1, 2, EOT]);
  assert.deepEqual(t.loss_mask, [1, 1, 1]);
  assert.deepEqual(t.logprobs, [-0.1, -0.2, -0.30000000000000004]);
  assert.equal(t.spans[0]!.synthetic_eos_at, null);
});

test('a stop-string finish without EOS gets one synthetic EOS (mask 0, logprob 0), and the observation offset follows it exactly', () => {
  const t = startTrajectory(5, limits);
  assert.equal(appendGenerated(t, gen([1, 2, 3]), tok), null);
  assert.deepEqual(t.response_ids, [1, 2, 3, EOT]);
  assert.deepEqual(t.loss_mask, [1, 1, 1, 0]);
  assert.equal(t.logprobs[3], 0);
  assert.equal(t.spans[0]!.synthetic_eos_at, 3);
  // suffix starts with the end-of-turn token; it is not doubled after the synthetic EOS
  assert.equal(appendObservation(t, [EOT, 198, 77, 78, EOT, 198, 79], tok), null);
  assert.deepEqual(t.response_ids, [1, 2, 3, EOT, 198, 77, 78, EOT, 198, 79]);
  assert.deepEqual(t.spans[0], { gen_start: 0, gen_len: 3, synthetic_eos_at: 3, obs_start: 4, obs_len: 6 });
  assert.deepEqual(t.loss_mask, [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
  // the next turn starts right after the observation: no token dropped, none doubled
  assert.equal(appendGenerated(t, gen([5, EOT]), tok), null);
  assert.equal(t.spans[1]!.gen_start, 10);
  assert.deepEqual(t.response_ids.slice(10), [5, EOT]);
  assert.ok(
    checkInvariants({ response_ids: t.response_ids, loss_mask: t.loss_mask, rollout_logprobs: t.logprobs }, t.budget)
      .ok,
  );
});

test('an EOS other than end-of-turn keeps the suffix end-of-turn token', () => {
  const t = startTrajectory(5, limits);
  appendGenerated(t, gen([1, EOS2]), tok);
  appendObservation(t, [EOT, 198, 77], tok);
  assert.deepEqual(t.response_ids, [1, EOS2, EOT, 198, 77]);
});

test('a length finish is TRUNCATED budget_exhausted; tokens kept', () => {
  const t = startTrajectory(95, limits); // budget 5
  assert.deepEqual(appendGenerated(t, gen([1, 2, 3, 4, 5], 'length'), tok), {
    status: 'TRUNCATED',
    reason: 'budget_exhausted',
  });
  assert.equal(t.response_ids.length, 5);
  assert.equal(remainingBudget(t), 0);
});

test('a stop string on the last budget token: no room for the synthetic EOS → TRUNCATED', () => {
  const t = startTrajectory(97, limits); // budget 3
  assert.deepEqual(appendGenerated(t, gen([1, 2, 3]), tok), { status: 'TRUNCATED', reason: 'no_budget_for_eos' });
  assert.deepEqual(t.loss_mask, [1, 1, 1]);
});

test('observations count against the budget', () => {
  const t = startTrajectory(90, limits); // budget 10
  appendGenerated(t, gen([1, 2, EOT]), tok);
  assert.deepEqual(appendObservation(t, [EOT, 1, 2, 3, 4, 5, 6, 7, 8], tok), {
    status: 'TRUNCATED',
    reason: 'observation_exceeds_budget',
  });
  assert.equal(t.response_ids.length, 3);
  assert.equal(appendObservation(t, [EOT, 1, 2, 3, 4, 5, 6, 7], tok), null);
  assert.equal(remainingBudget(t), 0);
});

test('strict validation: abort, bad finish reason, logprob count, over budget, bad values', () => {
  const t = startTrajectory(95, limits);
  assert.deepEqual(appendGenerated(t, gen([1], 'abort'), tok), { status: 'ABORTED', reason: 'engine_abort' });
  assert.equal(appendGenerated(t, gen([1], 'tool_calls'), tok)?.status, 'FAILED');
  assert.equal(appendGenerated(t, { token_ids: [1, 2], logprobs: [-1], finish_reason: 'stop' }, tok)?.status, 'FAILED');
  assert.equal(appendGenerated(t, gen([1, 2, 3, 4, 5, 6], 'length'), tok)?.status, 'FAILED');
  assert.equal(
    appendGenerated(t, { token_ids: [1], logprobs: [Number.NaN], finish_reason: 'stop' }, tok)?.status,
    'FAILED',
  );
  assert.equal(appendGenerated(t, { token_ids: [-1], logprobs: [-1], finish_reason: 'stop' }, tok)?.status, 'FAILED');
  assert.equal(t.response_ids.length, 0, 'nothing appended on a rejected generation');
});

test('observation suffix from two renders: prefix-stability checked, starts at the last end-of-turn', () => {
  const prefix = [10, 11, EOT, 198, 12, 13, EOT, 198];
  const extended = [...prefix, 14, 15, EOT, 198, 16];
  assert.deepEqual(observationSuffix(prefix, extended, EOT), [EOT, 198, 14, 15, EOT, 198, 16]);
  assert.throws(() => observationSuffix(prefix, [10, 99, ...extended.slice(2)], EOT), TrajectoryError);
  assert.throws(() => observationSuffix([1, 2], [1, 2, 3], EOT), /no end-of-turn/);
  assert.throws(() => appendObservation(startTrajectory(1, limits), [1, 2], tok), /must start with the end-of-turn/);
});

test('invariants and masked spans', () => {
  assert.deepEqual(maskedSpans([1, 1, 0, 0, 1, 0]), [
    [2, 4],
    [5, 6],
  ]);
  const bad = checkInvariants({ response_ids: [1, 2], loss_mask: [1, 0], rollout_logprobs: [-1, -1] }, 1);
  assert.equal(bad.ok, false);
  assert.equal(bad.problems.length, 2);
  assert.equal(bad.mask_sum, 1);
});

test("an empty generation and vLLM's -9999 placeholder logprob are invalid answers", () => {
  const t = startTrajectory(5, limits);
  assert.match(appendGenerated(t, gen([]), tok)!.reason, /empty generation/);
  assert.deepEqual(appendGenerated(t, gen([], 'abort'), tok), { status: 'ABORTED', reason: 'engine_abort' });
  const placeholder = appendGenerated(
    t,
    { token_ids: [1, 2], logprobs: [-0.5, VLLM_PLACEHOLDER_LOGPROB], finish_reason: 'stop' },
    tok,
  );
  assert.equal(placeholder?.status, 'FAILED');
  assert.match(placeholder!.reason, /-9999 for token 1/);
  assert.equal(t.response_ids.length, 0);
});

test('the text the environment reads leaves out the trailing EOS; the ids stay exact', () => {
  assert.deepEqual(idsForText([1, 2, EOT], tok.eos_ids), [1, 2]);
  assert.deepEqual(idsForText([1, EOT, 2], tok.eos_ids), [1, EOT, 2]);
  assert.deepEqual(idsForText([1, 2], tok.eos_ids), [1, 2]);
});

test('image/vision tokens anywhere on the response side fail the episode, with where they are', () => {
  const withForbidden = { ...tok, forbidden_response_ids: [151655] };
  const t = startTrajectory(5, limits);
  appendGenerated(t, gen([1, 2, EOT]), withForbidden);
  assert.equal(forbiddenResponseTokens(t, withForbidden), null);
  appendObservation(t, [EOT, 198, 151655, EOT, 198], withForbidden);
  assert.match(
    forbiddenResponseTokens(t, withForbidden)!.reason,
    /1 image\/vision placeholder token\(s\) \(first: id 151655 at response offset 4, observation\)/,
  );
  assert.equal(forbiddenResponseTokens(t, tok), null, 'conventions recorded without the list check nothing');
});

test("an observation suffix may hold only the template's own special tokens", () => {
  const IM_START = 151644;
  const specials = [IM_START, EOT, 151655];
  const skeleton = [EOT, 198, IM_START, 1, 2, EOT, 198, IM_START, 3];
  checkObservationSpecials([EOT, 198, IM_START, 1, 5, 6, 2, EOT, 198, IM_START, 3], skeleton, specials);
  assert.throws(
    () => checkObservationSpecials([EOT, 198, IM_START, 1, 151655, EOT, 198, IM_START, 3], skeleton, specials),
    /special tokens the template did not write/,
  );
  assert.throws(
    () =>
      checkObservationSpecials([EOT, 198, IM_START, 1, EOT, IM_START, 9, EOT, 198, IM_START, 3], skeleton, specials),
    TrajectoryError,
  );
});
