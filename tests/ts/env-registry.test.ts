// Environments as registered objects: the registry and rollout.environment, the stop strings and
// prompts an environment gives, and its per-episode state through the envStep activity.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { envStep } from '../../activities/env-step.js';
import { ConfigError, loadConfig } from '../../config/load.js';
import { RolloutConfig } from '../../config/schema.js';
import { episodeEnvironment } from '../../client/audit.js';
import { buildMessages } from '../../lib/data/prompt.js';
import { environmentNames, getEnvironment } from '../../lib/env/index.js';
import { initialRunState } from '../../config/run-plan.js';
import { episodeSettings } from '../../protocol/episode.js';
import { HISTORY_FIXTURES, loadHistoryFixture } from '../../testing/history-fixtures.js';

const row = { id: 'r', problem: 'Find x.', answer: '5', images: ['blob:cas/aa/x.png'] };
const call = (answer: string) => `<tool_call>{"name":"calc_score","arguments":{"answer":"${answer}"}}</tool_call>`;

test('the registry: environments by name, an unknown name names the known ones', () => {
  assert.ok(environmentNames().includes('geo3k'));
  for (const name of environmentNames()) assert.equal(getEnvironment(name).name, name);
  assert.throws(
    () => getEnvironment('chess'),
    new RegExp(`unknown environment "chess" \\(known: ${environmentNames().join(', ')}\\)`),
  );
});

test('rollout.environment: geo3k by default; an unknown name is a config error naming the known ones', () => {
  assert.equal(loadConfig({ env: {} }).rollout.environment, 'geo3k');
  assert.throws(
    () => loadConfig({ env: {}, sets: ['rollout.environment=chess'] }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /rollout\.environment: unknown environment "chess" \(known: geo3k/);
      return true;
    },
  );
});

test("the run plan takes the environment's name and stop strings; single-turn stops nowhere", () => {
  const plan = initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/env-registry'] }), 'r').plan;
  assert.deepEqual([plan.episode.environment, plan.episode.stop], ['geo3k', [...getEnvironment('geo3k').stop]]);
  assert.equal(plan.eval_episode.environment, 'geo3k');
  const single = initialRunState(
    loadConfig({ env: {}, sets: ['state_dir=/tmp/env-registry', 'rollout.multi_turn=false'] }),
    'r',
  ).plan;
  assert.deepEqual(single.episode.stop, []);
  // settings for one environment never get another's stop strings
  assert.throws(
    () => episodeSettings({ ...RolloutConfig.parse({}), environment: 'other' }),
    /rollout\.environment is "other"/,
  );
});

test("Geo3K behind the interface: its prompt is buildMessages', its rows need an image, it keeps no state", async () => {
  const geo3k = getEnvironment('geo3k');
  const built = buildMessages(row, { tools: true });
  assert.deepEqual(geo3k.prompt(row, { tools: true }), { messages: built.messages, tools: built.tools });
  assert.deepEqual(geo3k.prompt(row, { tools: false }).tools, []);
  assert.equal(geo3k.rowSchema.safeParse({ problem: 'Find x.', answer: '5' }).success, false);
  assert.equal(geo3k.rowSchema.safeParse({ problem: 'Find x.', answer: '5', images: ['a.png'] }).success, true);
  assert.deepEqual(geo3k.initialState(row), {});
  assert.deepEqual((await geo3k.grade('\\sqrt{25}', '5', {})).reward, 1);
});

test('envStep: the state goes in and comes out; without one the initial state; a wrong one fails without retries', async () => {
  const base = { environment: 'geo3k', text: call('7'), label: '5', turn: 1, max_turns: 3 };
  const r = await envStep({ ...base, state: {} });
  assert.deepEqual([r.done, r.score, r.reason, r.state], [false, 0, 'wrong', {}]);
  assert.deepEqual((await envStep(base)).state, {}, 'inputs made before state existed start from the initial state');
  await assert.rejects(
    envStep({ ...base, state: { calls: [] } }),
    (err: unknown) =>
      err instanceof ApplicationFailure &&
      err.nonRetryable &&
      err.type === 'InvalidEnvStepInput' &&
      /not a state of environment geo3k/.test(err.message),
  );
});

test("the audit reads an episode's environment from its start event (a recorded Geo3K history)", () => {
  const { history } = loadHistoryFixture(path.join(HISTORY_FIXTURES, 'episode-tool-call-correct.json'));
  assert.equal(episodeEnvironment(history), 'geo3k');
  assert.equal(episodeEnvironment({ events: [] }), null);
});
