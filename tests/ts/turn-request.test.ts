// The one builder of a turn's engine request (workflows/turn-request.ts): every episode workflow sends
// what it returns, so which weights a turn accepts, and whether an aborted turn is generated again,
// are the same for the TS, verifiers and OpenEnv episodes.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RolloutConfig } from '../../config/schema.js';
import { type EpisodeInput, episodeSettings, turnSeed } from '../../protocol/episode.js';
import { turnRequest } from '../../workflows/turn-request.js';

const prompt = { prompt_ref: 'prompts/p.json', conventions: { eos_token_id: 1 } } as unknown as Parameters<
  typeof turnRequest
>[3];
const inputOf = (rollout: Record<string, unknown>): EpisodeInput =>
  ({ settings: episodeSettings(RolloutConfig.parse(rollout)), weight_version: 3 }) as unknown as EpisodeInput;

test('synchronous: the episode takes its own weights only; the turn seeded by (seed, episode, turn)', () => {
  const req = turnRequest(inputOf({ seed: 7 }), 'run/0/1/2', 2, prompt, 'traj/1', 40);
  assert.equal(req.expected_weight_version, 3);
  assert.equal(req.min_weight_version, undefined);
  assert.equal(req.regenerate_aborted, undefined);
  assert.equal(req.sampling.max_tokens, 40);
  assert.equal(req.sampling.seed, turnSeed(7, 'run/0/1/2', 2));
  assert.equal(req.trajectory_ref, 'traj/1');
});

test('the async window: any weights as new; a turn a sync aborted is generated again only under abort', () => {
  const keep = turnRequest(inputOf({ max_staleness: 1 }), 'e', 1, prompt, null, 8);
  assert.equal(keep.min_weight_version, 3);
  assert.equal(keep.expected_weight_version, undefined);
  assert.equal(keep.regenerate_aborted, undefined);
  const abort = turnRequest(inputOf({ max_staleness: 1, sync_in_flight: 'abort' }), 'e', 1, prompt, null, 8);
  assert.equal(abort.regenerate_aborted, true);
});
