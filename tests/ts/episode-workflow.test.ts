// The episode workflow on a real Temporal dev server with a scripted engine double: every
// termination path, token-exact stitching, masks, payload sizes, failover and the audit view.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Sample } from '../../lib/contract.js';
import { activityCalls, auditEpisode, largestPayloadBytes, listEpisodes } from '../../client/audit.js';
import { spawnSync } from 'node:child_process';
import { REPO_ROOT } from '../../base/paths.js';
import { maskedSpans } from '../../lib/trajectory.js';
import { episode } from '../../workflows/episode.js';
import { episodeStartOptions, episodeWorkflowId } from '../../protocol/episode.js';
import {
  decode,
  IM_END,
  IMAGE_PAD,
  startEpisodeHarness,
  toolCall,
  type EpisodeHarness,
} from '../../testing/episode-engine-double.js';
import { recordHistory } from '../../testing/history-fixtures.js';
import type { EngineGenerateRequest } from '../../activities/episode-engines.js';

const call = toolCall;

let h: EpisodeHarness;
before(async () => {
  h = await startEpisodeHarness('run-t');
});
after(async () => {
  await h?.stop();
});
const run: EpisodeHarness['run'] = (...args) => h.run(...args);

/** prompt + response == the last history the engine was given + its output (+ a synthetic EOS). */
function assertTokenExact(sample: Sample, requests: EngineGenerateRequest[]) {
  const last = requests[requests.length - 1]!;
  const full = [...sample.prompt_ids, ...sample.response_ids];
  assert.deepEqual(
    full.slice(0, last.token_ids.length),
    last.token_ids,
    'sample starts with the last canonical history',
  );
  assert.equal(sample.response_ids.length, sample.loss_mask.length);
  assert.equal(sample.response_ids.length, sample.rollout_logprobs.length);
  sample.loss_mask.forEach((m, i) => m === 0 && assert.equal(sample.rollout_logprobs[i], 0));
  // every masked span is the synthetic EOS or the template's user turn
  for (const [s, e] of maskedSpans(sample.loss_mask)) {
    const text = decode(sample.response_ids.slice(s, e));
    assert.match(
      text,
      /^(<\|im_end\|>)?(\n<\|im_start\|>user\n[\s\S]*<\|im_end\|>\n<\|im_start\|>assistant\n)?$/,
      `masked span ${s}-${e}: ${JSON.stringify(text)}`,
    );
    assert.ok(text.length > 0);
  }
}

test('correct via tool: stop string without EOS → synthetic EOS (mask 0), COMPLETED, reward 1', async () => {
  const { id, summary, sample, requests } = await run(() => ({ text: call('60') }));
  assert.deepEqual(
    [summary.status, summary.reward, summary.turns, summary.truncated_reason, summary.weight_version],
    ['COMPLETED', 1, 1, null, 3],
  );
  assert.equal(decode(sample.response_ids).endsWith('</tool_call><|im_end|>'), true);
  assert.equal(sample.loss_mask.at(-1), 0);
  assert.equal(
    sample.loss_mask.slice(0, -1).every((m) => m === 1),
    true,
  );
  assert.equal(sample.prompt_ids.filter((t) => t === IMAGE_PAD).length, 4, 'image placeholders match the image');
  assertTokenExact(sample, requests);
  assert.equal(requests[0]!.sampling.max_tokens, 400);
  assert.equal(
    (await scheduledActivities(id)).includes('scoreEpisode'),
    false,
    'the environment graded the answer: no second grading',
  );
  await recordHistory(h.client, episodeWorkflowId(id), 'episode-tool-call-correct');
});

/** The activities an episode ran, local ones included. */
async function scheduledActivities(id: string): Promise<string[]> {
  return activityCalls(await h.client.workflow.getHandle(episodeWorkflowId(id)).fetchHistory()).map((c) => c.type);
}

test('wrong until max_turns: feedback, a last chance, observations masked, TRUNCATED out_of_turns', async () => {
  const { id, summary, sample, requests } = await run((_r, n) => ({ text: call(String(10 + n)) }), {
    max_response_len: 2000,
  });
  assert.deepEqual(
    [summary.status, summary.truncated_reason, summary.reward, summary.turns],
    ['TRUNCATED', 'out_of_turns', 0, 3],
  );
  assert.equal(requests.length, 3);
  // each turn's request is exactly the previous request + output + synthetic EOS + observation
  for (let i = 1; i < requests.length; i++) {
    const prev = requests[i - 1]!.token_ids;
    assert.deepEqual(requests[i]!.token_ids.slice(0, prev.length), prev);
    const added = decode(requests[i]!.token_ids.slice(prev.length));
    assert.match(
      added,
      /<\/tool_call><\|im_end\|>\n<\|im_start\|>user\n[\s\S]*incorrect[\s\S]*<\|im_end\|>\n<\|im_start\|>assistant\n$/,
    );
    assert.equal(
      requests[i]!.sampling.max_tokens,
      2000 - (requests[i]!.token_ids.length - sample.prompt_ids.length),
      'budget counts observations',
    );
  }
  assert.match(decode(requests[2]!.token_ids), /last chance[\s\S]*\\boxed/);
  assert.notEqual(requests[0]!.sampling.seed, requests[1]!.sampling.seed);
  assertTokenExact(sample, requests);
  assert.equal(sample.turns.length, 3);
  assert.equal(sample.turns[0]!.observation_tokens > 0, true);
  assert.equal(sample.turns[2]!.observation_tokens, 0);

  const audit = await auditEpisode(h.client, h.store, id);
  assert.equal(audit.turns.length, 3);
  assert.equal(audit.turns[0]!.synthetic_eos, true);
  assert.match(audit.turns[1]!.observation!, /last chance/);
  assert.equal(audit.invariants?.ok, true);
  assert.equal(
    audit.invariants?.mask_sum,
    sample.turns.reduce((a, t) => a + t.generated_tokens, 0),
  );
  assert.ok(audit.turns.every((t) => t.mean_logprob! < 0 && t.engine === 'http://double-a' && t.weight_version === 3));
  await recordHistory(h.client, episodeWorkflowId(id), 'episode-wrong-until-out-of-turns');
});

test('no tool call: the final \\boxed{} answer is scored, COMPLETED', async () => {
  const { summary, sample, requests } = await run(() => ({ text: 'The area is \\boxed{60}.' }));
  assert.deepEqual([summary.status, summary.reward, summary.turns], ['COMPLETED', 1, 1]);
  assert.equal(sample.response_ids.at(-1), IM_END);
  assert.ok(
    sample.loss_mask.every((m) => m === 1),
    'an EOS finish appends nothing',
  );
  assertTokenExact(sample, requests);
});

test('budget exhausted: a length finish is TRUNCATED budget_exhausted, never more tokens than the budget', async () => {
  const { summary, sample, requests } = await run(() => ({ text: 'x'.repeat(500) }), { max_response_len: 50 });
  assert.deepEqual(
    [summary.status, summary.truncated_reason, summary.response_len],
    ['TRUNCATED', 'budget_exhausted', 50],
  );
  assert.equal(requests[0]!.sampling.max_tokens, 50);
  assertTokenExact(sample, requests);
});

test('observations count against the budget: an observation that does not fit truncates', async () => {
  const { summary, sample } = await run(() => ({ text: call('1') }), { max_response_len: 90 });
  assert.equal(summary.status, 'TRUNCATED');
  assert.equal(summary.truncated_reason, 'observation_exceeds_budget');
  assert.ok(sample.response_ids.length <= 90);
});

test('single-turn mode: one generate, no tools, reward from \\boxed{}', async () => {
  const { id, summary, requests, sample } = await run(() => ({ text: 'so \\boxed{60}' }), { multi_turn: false });
  assert.deepEqual([summary.status, summary.reward, summary.turns], ['COMPLETED', 1, 1]);
  assert.ok((await scheduledActivities(id)).includes('scoreEpisode'), 'without an environment the score step grades');
  assert.deepEqual(requests[0]!.sampling.stop, []);
  assert.doesNotMatch(decode(sample.prompt_ids), /Tools/);
  await recordHistory(h.client, episodeWorkflowId(id), 'episode-single-turn-scored');
});

test('engine abort → ABORTED; wrong logprob count → FAILED; both stored with reward 0', async () => {
  const aborted = await run(() => ({ text: call('60'), finish: 'abort' }));
  assert.deepEqual(
    [aborted.summary.status, aborted.summary.reward, aborted.summary.truncated_reason],
    ['ABORTED', 0, 'engine_abort'],
  );
  const failed = await run(() => ({ text: 'a', logprobs: [-1, -1, -1] }));
  assert.equal(failed.summary.status, 'FAILED');
  assert.match(failed.summary.truncated_reason!, /logprobs/);
  assert.equal(failed.sample.response_ids.length, 0);
});

test('a dead engine: the retry goes to another engine', async () => {
  const { summary, requests, id } = await run((_r, n) =>
    n === 0
      ? { text: '', fail: Object.assign(new Error('connect ECONNREFUSED'), { engine: 'http://double-a' }) }
      : { text: '\\boxed{60}' },
  );
  assert.equal(summary.status, 'COMPLETED');
  assert.equal(requests.length, 2);
  assert.deepEqual(requests[1]!.exclude_engines, ['http://double-a']);
  const audit = await auditEpisode(h.client, h.store, id);
  assert.equal(audit.turns[0]!.engine, 'http://double-b');
  assert.equal(audit.turns[0]!.generate_attempt, 2);
  assert.match(audit.turns[0]!.generate_retried_after ?? '', /ECONNREFUSED/, 'the audit says why the turn was retried');
  assert.equal(audit.generate_calls, 1, 'one scheduled generate, two attempts');
});

test('a retried step finds the episode already run (same workflow id), and episodes list by prefix', async () => {
  const { input, summary, id } = await run(() => ({ text: '\\boxed{60}' }));
  await assert.rejects(
    h.client.workflow.start(episode, {
      taskQueue: h.server.cfg.temporal.task_queues.rollout,
      ...episodeStartOptions(id),
      args: [input],
    }),
    /already started|AlreadyStarted/i,
  );
  const loadEpisodeSummary = h.worker.worker.options.activities.get('loadEpisodeSummary')!;
  assert.deepEqual(await loadEpisodeSummary({ episode_id: id, weight_version: input.weight_version }), summary);
  assert.deepEqual(await h.client.workflow.getHandle(episodeWorkflowId(id)).result(), summary);
  // visibility is eventually consistent
  let listed: Awaited<ReturnType<typeof listEpisodes>> = [];
  for (let i = 0; i < 50 && !listed.some((e) => e.episode_id === id); i++) {
    listed = await listEpisodes(h.client, 'run-t', 0);
    await new Promise((r) => setTimeout(r, 200));
  }
  const entry = listed.find((e) => e.episode_id === id);
  assert.deepEqual([entry?.status, entry?.reward], ['COMPLETED', 1]);
  assert.deepEqual(await listEpisodes(h.client, 'run-t', 7), []);
});

test('nothing large travels in a payload (every payload < 256 KiB, no image bytes, no token arrays)', async () => {
  const { id } = await run((_r, n) => ({ text: call(String(n)) }));
  const history = await h.client.workflow.getHandle(episodeWorkflowId(id)).fetchHistory();
  let max = 0;
  const walk = (v: unknown): void => {
    if (!v || typeof v !== 'object') return;
    if (Array.isArray(v)) return v.forEach(walk);
    const o = v as Record<string, unknown>;
    if (o.data instanceof Uint8Array && 'metadata' in o) {
      max = Math.max(max, o.data.length);
      assert.doesNotMatch(Buffer.from(o.data).toString('utf8'), /data:image|base64,/);
      // Token arrays travel by blob ref, neither way between the workflow and its activities.
      assert.doesNotMatch(
        Buffer.from(o.data).toString('utf8'),
        /"(token_ids|response_ids|logprobs|observation_ids|prompt_ids)"/,
      );
    }
    Object.values(o).forEach(walk);
  };
  walk(history.events);
  assert.ok(max > 0 && max < 256 * 1024, `largest payload ${max} bytes`);
});

test('tempo-rl episodes show/list --json rebuild the episode from history + blob store', async () => {
  const { id, summary } = await run((_r, n) => ({ text: n === 0 ? call('7') : '\\boxed{60}' }), {
    max_response_len: 2000,
  });
  const cli = (...args: string[]) => {
    const sets = ['--set', `state_dir=${h.server.cfg.state_dir}`, '--set', `server.port=${h.server.cfg.server.port}`];
    const env = { ...process.env, TEMPORAL_ADDRESS: '' };
    const r = spawnSync(process.execPath, ['--import', 'tsx', `${REPO_ROOT}/cli/main.ts`, ...sets, ...args], {
      encoding: 'utf8',
      env,
      cwd: REPO_ROOT,
    });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout);
  };
  const shown = cli('episodes', 'show', id, '--json');
  assert.deepEqual(
    [shown.status, shown.reward, shown.turns.length, shown.invariants.ok, shown.invariants.lengths_equal],
    [summary.status, 1, 2, true, true],
  );
  assert.equal(shown.invariants.response_length, summary.response_len);
  assert.ok(
    shown.turns.every(
      (t: { engine: string; finish_reason: string; mean_logprob: number }) =>
        t.engine && t.finish_reason === 'stop' && t.mean_logprob < 0,
    ),
  );
  assert.match(shown.turns[0].observation, /incorrect/);
  const history = await h.client.workflow.getHandle(episodeWorkflowId(id)).fetchHistory();
  assert.ok(largestPayloadBytes(history) < 256 * 1024);
  const listed = cli('episodes', 'list', 'run-t', '--json');
  assert.equal(listed.run_id, 'run-t');
  assert.ok(listed.episodes.length > 0, 'earlier episodes of run-t are listed');
});
