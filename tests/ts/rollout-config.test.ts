// Rollout keys that are gone are refused with why; sampling is the distribution the trainer scores,
// and nothing restricts it on the wire; a workflow run's length is bounded.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { MAX_STEPS_PER_WORKFLOW_RUN, REMOVED_KEYS, RunConfig } from '../../config/schema.js';
import { TrainHyper } from '../../lib/contract.js';
import { initialRunState } from '../../config/run-plan.js';

test('top_p and reward_fn are not keys: each is refused with why', () => {
  for (const key of ['top_p', 'reward_fn'] as const) {
    const sets = [`rollout.${key}=${key === 'reward_fn' ? 'math' : '1'}`];
    assert.throws(
      () => loadConfig({ env: {}, sets }),
      (err: Error) => {
        assert.match(err.message, new RegExp(`rollout\\.${key}: unknown key — removed: `));
        return true;
      },
    );
  }
  assert.match(REMOVED_KEYS['rollout.top_p']!, /full distribution.*the trainer scores/);
});

test('the engines sample from the full distribution, the one the trainer scores', () => {
  assert.equal(
    initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/rollout-config'] }), 'r').plan.episode.top_p,
    1,
  );
});

test('no token restriction travels: the trainer hyper-parameters and the episode settings refuse or leave out allowed_token_ids', () => {
  assert.equal(TrainHyper.safeParse({ ...TrainHyper.parse({}), allowed_token_ids: [64, 65] }).success, false);
  const episode = initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/rollout-config'] }), 'r').plan.episode;
  assert.equal('allowed_token_ids' in episode, false);
});

test(`steps_per_workflow_run is bounded (${MAX_STEPS_PER_WORKFLOW_RUN}): a run's history stays far from Temporal's 50k events`, () => {
  assert.equal(
    RunConfig.parse({ steps_per_workflow_run: MAX_STEPS_PER_WORKFLOW_RUN }).steps_per_workflow_run,
    MAX_STEPS_PER_WORKFLOW_RUN,
  );
  const r = RunConfig.safeParse({ steps_per_workflow_run: 50 });
  assert.equal(r.success, false);
  assert.match(r.error!.issues[0]!.message, /at most 5.*50k/);
});
