// The env-step and score activities: model output is a result, input that is not the model's doing
// (an empty label, a turn past max_turns) fails without retries, the grader options pass through, and
// an environment that reads a whole response gives its own reward.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { envStep } from '../../activities/env-step.js';
import { scoreEpisode } from '../../activities/score.js';
import { RolloutConfig } from '../../config/schema.js';
import { environmentNames, registerEnvironment } from '../../lib/env/registry.js';
import { episodeSettings } from '../../protocol/episode.js';
import { registerTestEnvironments, targetLetterEnvironment } from '../../testing/environments.js';

/** The environments the product registers: this file's process before it registers the tests' own. */
const PRODUCT_ENVIRONMENTS = environmentNames();

const call = (answer: string) => `<tool_call>{"name":"calc_score","arguments":{"answer":"${answer}"}}</tool_call>`;
const nonRetryable = (type: string, re: RegExp) => (err: unknown) =>
  err instanceof ApplicationFailure && err.nonRetryable === true && err.type === type && re.test(err.message);

test('envStep: an empty label or a turn past max_turns fails without retries', async () => {
  const base = { environment: 'geo3k', text: call('5'), label: '5', turn: 1, max_turns: 3 };
  await assert.rejects(envStep({ ...base, label: '' }), nonRetryable('InvalidEnvStepInput', /label is empty/));
  await assert.rejects(
    envStep({ ...base, turn: 4 }),
    nonRetryable('InvalidEnvStepInput', /turn.*greater than max_turns/),
  );
  await assert.rejects(envStep({ ...base, environment: 'nope' }), nonRetryable('UnknownEnvironment', /nope/));
  assert.equal((await envStep(base)).score, 1);
});

test('envStep: the match option reaches the grader', async () => {
  const base = { environment: 'geo3k', text: call('8.66'), label: '5*sqrt(3)', turn: 1, max_turns: 3 };
  assert.deepEqual([(await envStep(base)).score, (await envStep(base)).reason], [0, 'wrong']);
  assert.equal((await envStep({ ...base, match: 'rounded' })).score, 1);
});

test('scoreEpisode: exact by default, rounded on request, an empty label fails without retries', async () => {
  const base = { label: '5*sqrt(3)', tolerance: 0, final_answer: '8.66', response_text: null };
  assert.equal((await scoreEpisode(base)).reward, 0);
  assert.equal((await scoreEpisode({ ...base, match: 'rounded' })).reward, 1);
  assert.equal((await scoreEpisode({ ...base, tolerance: 0.001 })).reward, 1);
  for (const input of [
    { ...base, label: '' },
    { ...base, label: ' ', final_answer: null },
  ])
    await assert.rejects(scoreEpisode(input), nonRetryable('InvalidLabel', /label is empty/));
  await assert.rejects(scoreEpisode({ ...base, tolerance: -1 }), nonRetryable('InvalidScoreInput', /tolerance/));
  // a response without an answer is still a result: 0 with a reason
  assert.deepEqual(await scoreEpisode({ ...base, final_answer: null, response_text: 'no box' }), {
    reward: 0,
    extracted: null,
    reason: 'no \\boxed{} answer',
  });
});

test('rollout.reward_match reaches the episode settings: absent for exact (the default), kept for rounded', () => {
  assert.equal(RolloutConfig.parse({}).reward_match, 'exact');
  assert.equal(episodeSettings(RolloutConfig.parse({})).reward_match, undefined);
  assert.equal(
    episodeSettings(RolloutConfig.parse({ reward_match: 'rounded', reward_tolerance: 0.5 })).reward_match,
    'rounded',
  );
  assert.throws(() => RolloutConfig.parse({ reward_match: 'fuzzy' }));
});

test("scoreEpisode: an environment's scoreResponse rewards a response without a final answer; a final answer is still graded", async () => {
  registerTestEnvironments(); // target-letter: the share of the response equal to the label
  assert.ok(!PRODUCT_ENVIRONMENTS.includes(targetLetterEnvironment.name), 'a test environment, not a product one');
  const base = { label: 'a', tolerance: 0, final_answer: null, environment: targetLetterEnvironment.name };
  assert.deepEqual(await scoreEpisode({ ...base, response_text: 'abca' }), {
    reward: 0.5,
    extracted: 'abca',
    reason: '2/4 characters equal "a"',
  });
  assert.equal((await scoreEpisode({ ...base, response_text: '\\boxed{a}' })).reward, 1 / 9, 'no \\boxed{} read');
  assert.equal((await scoreEpisode({ ...base, final_answer: 'a', response_text: null })).reward, 1, 'graded');
  assert.throws(() => registerEnvironment(targetLetterEnvironment), /registered already/);
});
