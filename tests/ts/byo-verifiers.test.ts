// A verifiers (v1) environment through the Python environment worker: Geo3K written as a verifiers
// environment (workers/environments/tempo_rl_geo3k), its harness in the worker, each model call a
// modelCall update that this side renders and generates with the engine double, token-exact. Then
// the worker SIGKILLed mid-episode: a new one reruns the harness, its calls get the recorded
// completions back, and the episode ends with the same turns and tokens as one never killed. Then
// the bad input of a Python environment: each a FAILED episode naming the cause.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { activityCalls, auditFromHistory } from '../../client/audit.js';
import { Sample } from '../../lib/contract.js';
import { REPO_ROOT } from '../../base/paths.js';
import { stateLayout } from '../../stores/layout.js';
import { connectClient } from '../../supervise/temporal.js';
import { RolloutConfig } from '../../config/schema.js';
import { getEnvironment } from '../../lib/env/registry.js';
import { pythonEnvSettings } from '../../config/run-plan.js';
import { withSets } from '../../config/load.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { episode } from '../../workflows/episode.js';
import { episodeSettings, episodeWorkflowId, type EpisodeInput, type EpisodeSummary } from '../../protocol/episode.js';
import { EngineDouble, type ScriptedTurn } from '../../testing/episode-engine-double.js';
import {
  startEnvironmentWorker,
  startRolloutWorker,
  startTestServer,
  stopChild,
  type RunningWorker,
  type TestServer,
} from '../../testing/temporal.js';
import type { EngineGenerateRequest } from '../../activities/episode-engines.js';

const call = (answer: string) => `<tool_call>{"name":"calc_score","arguments":{"answer":"${answer}"}}</tool_call>`;
/** Environments that misbehave on purpose (tests/fixtures/environments). */
const FIXTURE_ENVS = path.join(REPO_ROOT, 'tests', 'fixtures', 'environments');
const ROWS = [{ problem: 'Find the angle x.', answer: '60' }];

let server: TestServer;
let client: Client;
let store: LocalBlobStore;
let rollout: RunningWorker;
const envWorkers: ChildProcess[] = [];
type Script = (req: EngineGenerateRequest, n: number) => ScriptedTurn;
const scripts = new Map<string, Script>();
const counts = new Map<string, number>();
let engine: EngineDouble;

before(async () => {
  server = await startTestServer();
  store = new LocalBlobStore(stateLayout(server.cfg.state_dir).blobs);
  engine = new EngineDouble((req) => {
    const n = counts.get(req.session_id) ?? 0;
    counts.set(req.session_id, n + 1);
    return scripts.get(req.session_id)!(req, n);
  });
  rollout = await startRolloutWorker(server.cfg, {
    cfg: server.cfg,
    store,
    engines: () => engine,
    imageProcessor: null,
  });
  client = await connectClient(server.cfg);
  envWorkers.push(await startEnvironmentWorker(server.cfg, [FIXTURE_ENVS]));
});

after(async () => {
  for (const w of envWorkers) await stopChild(w, 'SIGKILL');
  await client?.connection.close();
  await rollout?.stop();
  await server?.stop();
});

let next = 0;
function inputFor(
  env: { id: string; args: Record<string, unknown>; harness?: string },
  sets: string[] = [],
): EpisodeInput {
  const cfg = withSets(server.cfg, [
    'rollout.environment=verifiers',
    `python_env.id=${env.id}`,
    'python_env.episode_timeout_s=60',
    ...sets,
  ]);
  cfg.python_env.args = env.args;
  const python_env = pythonEnvSettings(cfg)!;
  const settings = episodeSettings(
    RolloutConfig.parse({ environment: 'verifiers', max_turns: 3, max_response_len: 600, max_context_len: 4096 }),
    { env: getEnvironment('verifiers'), python_env, generate_timeout_s: 30 },
  );
  return {
    run_id: 'run-byo',
    step: 0,
    prompt_index: next++,
    sample_index: 0,
    prompt: { messages: [], tools: [] },
    label: '0',
    settings,
    weight_version: 0,
  };
}

async function run(
  input: EpisodeInput,
  script: Script,
): Promise<{ summary: EpisodeSummary; sample: Sample; id: string }> {
  const id = `${input.run_id}/${input.step}/${input.prompt_index}/${input.sample_index}`;
  scripts.set(id, script);
  const summary: EpisodeSummary = await client.workflow.execute(episode, {
    taskQueue: server.cfg.temporal.task_queues.rollout,
    workflowId: episodeWorkflowId(id),
    args: [input],
  });
  return { summary, sample: Sample.parse(await store.getJson(summary.sample_ref)), id };
}

const geo3k = { id: 'tempo_rl_geo3k', args: { rows: ROWS } };
const wrongThenRight: Script = (_req, n) => ({ text: n === 0 ? `I guess ${call('7')}` : `Then ${call('60')}` });

test('a verifiers environment runs turn by turn through the gateway: feedback rendered, reward from its rubric', {
  timeout: 120_000,
}, async () => {
  const { summary, sample, id } = await run(inputFor(geo3k), wrongThenRight);
  assert.deepEqual([summary.status, summary.reward, summary.turns], ['COMPLETED', 1, 2]);
  const requests = engine.requests.filter((r) => r.session_id === id);
  assert.equal(requests.length, 2, 'each model call generated once');
  // The environment's feedback is the observation between the two turns, rendered by the template.
  const decoded = sample.response_ids.map((t) => (t >= 1000 ? String.fromCodePoint(t - 1000) : '|')).join('');
  assert.match(decoded, /calc_score: the answer 7 is incorrect\. Please try again\./);
  assert.equal(sample.environment, 'verifiers');
  // The audit (tempo-rl episodes show) puts the environment's answer after the turn it answered.
  const history = await client.workflow.getHandle(episodeWorkflowId(id)).fetchHistory();
  const audit = await auditFromHistory(id, history, store);
  assert.deepEqual(
    audit.turns.map((t) => [t.turn, t.observation]),
    [
      [1, 'user: calc_score: the answer 7 is incorrect. Please try again.'],
      [2, null],
    ],
  );
});

test('SIGKILL of the environment worker mid-episode: the rerun harness gets the recorded calls back; same turns as never killed', {
  timeout: 180_000,
}, async () => {
  const clean = await run(inputFor(geo3k), wrongThenRight);
  let killed = false;
  let replacement: Promise<ChildProcess> | null = null;
  const killing: Script = (req, n) => {
    if (n === 1 && !killed) {
      killed = true;
      // The worker running this episode's harness dies while its second model call is generated;
      // another takes the retried activity.
      envWorkers.shift()!.kill('SIGKILL');
      replacement = startEnvironmentWorker(server.cfg, [FIXTURE_ENVS]);
    }
    return wrongThenRight(req, n);
  };
  const killedRun = await run(inputFor(geo3k), killing);
  assert.ok(killed);
  envWorkers.push(await replacement!);
  assert.deepEqual(
    [killedRun.summary.status, killedRun.summary.reward, killedRun.summary.turns],
    [clean.summary.status, clean.summary.reward, clean.summary.turns],
  );
  assert.deepEqual(
    killedRun.sample.response_ids,
    clean.sample.response_ids,
    'the same tokens as the episode never killed',
  );
  assert.equal(
    engine.requests.filter((r) => r.session_id === killedRun.id).length,
    2,
    'no model call generated twice: the rerun got the recorded ones',
  );
  const history = await client.workflow.getHandle(episodeWorkflowId(killedRun.id)).fetchHistory();
  const runs = activityCalls(history).filter((c) => c.type === 'runVerifiersEpisode');
  assert.ok(runs.length >= 1);
});

test('bad input of a Python environment: each a FAILED episode naming the cause', { timeout: 180_000 }, async () => {
  const answer: Script = () => ({ text: call('60') });
  const cases: Array<[string, { id: string; args: Record<string, unknown>; harness?: string }, RegExp]> = [
    [
      'a package that is not installed',
      { id: 'tempo_rl_no_such_env', args: {} },
      /EnvironmentNotInstalled.*tempo_rl_no_such_env.*not installed/,
    ],
    ['a module that is not a v1 taskset', { id: 'json', args: {} }, /InvalidEnvironment.*exports no vf\.Taskset/],
    [
      'arguments the taskset refuses',
      { id: 'tempo_rl_geo3k', args: { max_turns: 'many' } },
      /InvalidEnvironment.*max_turns/,
    ],
    ['a task index past the taskset', { id: 'tempo_rl_geo3k', args: { rows: [] } }, /InvalidEnvironment.*has 0 tasks/],
    [
      'a verifiers v0 environment',
      { id: 'tempo_rl_v0_env', args: {} },
      /InvalidEnvironment.*load_environment\(\): a verifiers v0 environment/,
    ],
    [
      'an environment that raises',
      { id: 'tempo_rl_bad_env', args: { mode: 'raises' } },
      /EnvironmentFailed.*broke on purpose/,
    ],
    [
      'an environment that answers with a non-string',
      { id: 'tempo_rl_bad_env', args: { mode: 'non_string' } },
      /EnvironmentFailed/,
    ],
    [
      'an environment that answers with 3 MB',
      { id: 'tempo_rl_bad_env', args: { mode: 'huge' } },
      /EnvironmentFailed.*model call 1.*bytes; at most 1000000/,
    ],
    [
      'a reward that is not finite',
      { id: 'tempo_rl_bad_env', args: { mode: 'nan_reward' } },
      /EnvironmentFailed.*not finite/,
    ],
  ];
  for (const [what, env, cause] of cases) {
    const { summary, sample } = await run(inputFor(env, ['python_env.attempts=1']), answer);
    assert.equal(summary.status, 'FAILED', what);
    assert.match(sample.truncated_reason ?? '', cause, what);
  }
});

test('a rerun whose request differs from the recorded one fails the episode: diverged at model call 1', {
  timeout: 180_000,
}, async () => {
  let killed = false;
  let replacement: Promise<ChildProcess> | null = null;
  const killing: Script = (_req, n) => {
    if (n === 1 && !killed) {
      killed = true;
      envWorkers.shift()!.kill('SIGKILL');
      replacement = startEnvironmentWorker(server.cfg, [FIXTURE_ENVS]);
    }
    return { text: 'an answer' };
  };
  const { summary, sample } = await run(
    inputFor({ id: 'tempo_rl_bad_env', args: { mode: 'random_feedback' } }),
    killing,
  );
  envWorkers.push(await replacement!);
  assert.equal(summary.status, 'FAILED');
  assert.match(sample.truncated_reason ?? '', /EnvironmentDiverged: diverged at model call 1/);
});

test('a row whose label is not a task index fails the episode, naming it', { timeout: 60_000 }, async () => {
  const { summary, sample } = await run({ ...inputFor(geo3k), label: 'seven' }, () => ({ text: call('60') }));
  assert.equal(summary.status, 'FAILED');
  assert.match(sample.truncated_reason ?? '', /label "seven" is not a task index/);
});

test('a hung environment is cut at python_env.episode_timeout_s and, its attempts spent, FAILED', {
  timeout: 120_000,
}, async () => {
  const input = inputFor({ id: 'tempo_rl_bad_env', args: { mode: 'hangs' } }, [
    'python_env.episode_timeout_s=5',
    'python_env.attempts=1',
  ]);
  const started = Date.now();
  const { summary, sample } = await run(input, () => ({ text: 'hello' }));
  assert.equal(summary.status, 'FAILED');
  assert.match(sample.truncated_reason ?? '', /timeout|timed out/i);
  assert.ok(Date.now() - started < 60_000, 'bounded by the timeout and the attempts');
});
