// An OpenEnv environment through the Python environment worker: guess the number
// (workers/environments/tempo_rl_guess), the workflow owning the loop — reset, then per turn render
// and generate with the engine double, token-exact, and a step on the worker — its server reached by
// URL or started by the worker as a local process. Then the worker SIGKILLed mid-episode (its server
// with it), and the server alone: the session is rebuilt by replaying the recorded actions, and the
// episode ends with the same turns as one never killed. Then bad input: each a FAILED episode naming
// the cause, the worker serving on.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { activityCalls, auditFromHistory } from '../../client/audit.js';
import { Sample } from '../../lib/contract.js';
import { envPythonBin, REPO_ROOT } from '../../base/paths.js';
import { stateLayout } from '../../stores/layout.js';
import { initialRunState } from '../../config/run-plan.js';
import { connectClient } from '../../supervise/temporal.js';
import { withSets } from '../../config/load.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { freePort } from '../../supervise/process.js';
import { episode } from '../../workflows/episode.js';
import { episodeWorkflowId, type EpisodeInput, type EpisodeSummary } from '../../protocol/episode.js';
import { decode, EngineDouble, type ScriptedTurn } from '../../testing/episode-engine-double.js';
import {
  startEnvironmentWorker,
  startRolloutWorker,
  startTestServer,
  stopChild,
  type RunningWorker,
  type TestServer,
} from '../../testing/temporal.js';
import type { EngineGenerateRequest, RenderChatRequest } from '../../activities/episode-engines.js';

const FIXTURE_ENVS = path.join(REPO_ROOT, 'tests', 'fixtures', 'environments');
const ENV_PATH = [path.join(REPO_ROOT, 'workers', 'environments'), FIXTURE_ENVS].join(':');
const guess = (n: number | string) =>
  `I guess. <tool_call>{"name":"step","arguments":{"guess":${JSON.stringify(n)}}}</tool_call>`;
/** random.Random(1).randint(1, 100): the number guess-the-number thinks of for seed 1 (row "1"). */
const SECRET = 18;

let server: TestServer;
let client: Client;
let store: LocalBlobStore;
let rollout: RunningWorker;
let urlServer: ChildProcess;
let guessUrl: string;
const envWorkers: ChildProcess[] = [];
type Script = (req: EngineGenerateRequest, n: number) => ScriptedTurn;
const scripts = new Map<string, Script>();
const counts = new Map<string, number>();
const renders: RenderChatRequest[] = [];
let engine: EngineDouble;

/** The OpenEnv server of `app` a worker started (its child running uvicorn), or null. */
function localServerPid(worker: ChildProcess, app = 'tempo_rl_guess:app'): number | null {
  for (const task of readdirSync(`/proc/${worker.pid}/task`)) {
    for (const pid of readFileSync(`/proc/${worker.pid}/task/${task}/children`, 'utf8').split(' ').filter(Boolean)) {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (cmdline.includes('uvicorn') && cmdline.includes(app)) return Number(pid);
    }
  }
  return null;
}

async function waitGone(pid: number): Promise<boolean> {
  for (let i = 0; i < 50; i++) {
    try {
      if (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.startsWith('Z')) return true;
    } catch {
      return true;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

before(async () => {
  server = await startTestServer();
  store = new LocalBlobStore(stateLayout(server.cfg.state_dir).blobs);
  engine = new EngineDouble((req) => {
    const n = counts.get(req.session_id) ?? 0;
    counts.set(req.session_id, n + 1);
    return scripts.get(req.session_id)!(req, n);
  });
  const render = engine.render.bind(engine);
  engine.render = (req) => {
    renders.push(req);
    return render(req);
  };
  rollout = await startRolloutWorker(server.cfg, {
    cfg: server.cfg,
    store,
    engines: () => engine,
    imageProcessor: null,
  });
  client = await connectClient(server.cfg);
  envWorkers.push(await startEnvironmentWorker(server.cfg, [FIXTURE_ENVS]));
  // One server run by hand, reached by its URL.
  const port = await freePort();
  guessUrl = `http://127.0.0.1:${port}`;
  urlServer = spawn(
    envPythonBin(),
    ['-m', 'uvicorn', 'tempo_rl_guess:app', '--port', String(port), '--log-level', 'warning'],
    {
      env: { ...process.env, PYTHONPATH: ENV_PATH },
      stdio: 'ignore',
    },
  );
  for (let i = 0; ; i++) {
    const ok = await fetch(`${guessUrl}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (i > 600) throw new Error('the OpenEnv server did not start');
    await new Promise((r) => setTimeout(r, 200));
  }
});

after(async () => {
  for (const w of envWorkers) await stopChild(w, 'SIGKILL');
  if (urlServer) await stopChild(urlServer, 'SIGKILL');
  await client?.connection.close();
  await rollout?.stop();
  await server?.stop();
});

let next = 0;
function inputFor(sets: string[], args: Record<string, unknown> = {}, label = '1'): EpisodeInput {
  const cfg = withSets(server.cfg, [
    'rollout.environment=openenv',
    'rollout.max_turns=4',
    'rollout.max_response_len=600',
    'python_env.episode_timeout_s=60',
    ...sets,
  ]);
  cfg.python_env.args = args;
  return {
    run_id: 'run-openenv',
    step: 0,
    prompt_index: next++,
    sample_index: 0,
    prompt: { messages: [], tools: [] },
    label,
    settings: initialRunState(cfg, 'run-openenv').plan.episode,
    weight_version: 0,
  };
}

async function run(input: EpisodeInput, script: Script) {
  const id = `${input.run_id}/${input.step}/${input.prompt_index}/${input.sample_index}`;
  scripts.set(id, script);
  const summary: EpisodeSummary = await client.workflow.execute(episode, {
    taskQueue: server.cfg.temporal.task_queues.rollout,
    workflowId: episodeWorkflowId(id),
    args: [input],
  });
  const history = await client.workflow.getHandle(episodeWorkflowId(id)).fetchHistory();
  return { summary, sample: Sample.parse(await store.getJson(summary.sample_ref)), id, history };
}

const byUrl = () => [`python_env.openenv.url=${guessUrl}`, 'python_env.openenv.observation_field=message'];
const local = ['python_env.openenv.app=tempo_rl_guess:app', 'python_env.openenv.observation_field=message'];
const threeGuesses: Script = (_req, n) => ({ text: guess([50, 25, SECRET][n] ?? SECRET) });

test('an OpenEnv server by URL, stepped turn by turn: the step tool, refusals and turns without an action answered, the reward its own', {
  timeout: 120_000,
}, async () => {
  const texts = [guess(50), 'I am not sure yet.', guess('eighteen'), guess(SECRET)];
  const { summary, sample, id, history } = await run(inputFor(byUrl()), (_req, n) => ({ text: texts[n]! }));
  assert.deepEqual([summary.status, summary.reward, summary.turns], ['COMPLETED', 1, 4]);
  assert.equal(engine.requests.filter((r) => r.session_id === id).length, 4, 'each turn generated once');
  assert.equal(sample.environment, 'openenv');
  // The reset's observation is the prompt's user message; the step tool is the environment's action schema.
  const first = renders.find((r) =>
    JSON.stringify(r.messages).includes('I am thinking of a whole number from 1 to 100'),
  );
  assert.ok(first, 'the reset observation rendered as the prompt');
  assert.equal(first.tools[0]?.function.name, 'step');
  assert.deepEqual(Object.keys(first.tools[0]!.function.parameters.properties as object), ['guess']);
  const response = decode(sample.response_ids);
  assert.match(response, /50 is wrong: the number is lower\. 6 guesses left\./);
  assert.match(response, /No action: the turn has no tool call/);
  assert.match(response, /The environment refused the action: guess: Input should be a valid integer/);
  const audit = await auditFromHistory(id, history, store);
  assert.deepEqual(
    audit.turns.map((t) => [t.turn, t.env_reason]),
    [
      [1, 'stepped'],
      [2, 'no_action: the turn has no tool call'],
      [3, 'refused'],
      [4, 'done'],
    ],
  );
  // The server's state is JSON: it is in the history with each step (for the record).
  const steps = activityCalls(history).filter((c) => c.type === 'openenvStep' && c.outcome === 'completed');
  assert.deepEqual(
    (steps.at(-1)!.result as { state: { guesses: number[] } }).state.guesses,
    [50, 'eighteen', SECRET].filter((g) => typeof g === 'number'),
  );
});

test('text actions: the turn is the action field, no stop string', { timeout: 60_000 }, async () => {
  const input = inputFor([...byUrl(), 'python_env.openenv.action=text', 'python_env.openenv.text_field=guess']);
  assert.deepEqual(input.settings.stop, []);
  const { summary, sample } = await run(input, (_req, n) => ({ text: n === 0 ? '60' : String(SECRET) }));
  assert.deepEqual([summary.status, summary.reward, summary.turns], ['COMPLETED', 1, 2]);
  assert.match(decode(sample.response_ids), /60 is wrong: the number is lower/);
});

test('SIGKILL of the environment worker mid-episode (its local server dies with it): a new worker rebuilds the session by replay; same turns as never killed', {
  timeout: 240_000,
}, async () => {
  const clean = await run(inputFor(local), threeGuesses);
  let serverPid: number | null = null;
  let replacement: Promise<ChildProcess> | null = null;
  const killing: Script = (req, n) => {
    if (n === 1 && !replacement) {
      // Turn 2 is generated while the worker holding the session dies; the next takes its step.
      const worker = envWorkers.shift()!;
      serverPid = localServerPid(worker);
      worker.kill('SIGKILL');
      replacement = startEnvironmentWorker(server.cfg, [FIXTURE_ENVS]);
    }
    return threeGuesses(req, n);
  };
  const killed = await run(inputFor(local), killing);
  envWorkers.push(await replacement!);
  assert.ok(serverPid, 'the worker had started its local server');
  assert.ok(await waitGone(serverPid), 'the local server died with its worker');
  assert.deepEqual(
    [killed.summary.status, killed.summary.reward, killed.summary.turns],
    [clean.summary.status, clean.summary.reward, clean.summary.turns],
  );
  assert.deepEqual([killed.summary.status, killed.summary.reward, killed.summary.turns], ['COMPLETED', 1, 3]);
  assert.deepEqual(
    killed.sample.response_ids,
    clean.sample.response_ids,
    'the same tokens as the episode never killed',
  );
  assert.equal(engine.requests.filter((r) => r.session_id === killed.id).length, 3, 'no turn generated twice');
  const steps = activityCalls(killed.history).filter((c) => c.type === 'openenvStep' && c.outcome === 'completed');
  assert.deepEqual(
    steps.map((c) => (c.result as { replayed: number }).replayed),
    [0, 1, 0],
    'step 2 rebuilt the session (reset + step 1 replayed); step 3 found it live',
  );
});

test('SIGKILL of the local server alone mid-episode: the worker starts it again and replays; same turns', {
  timeout: 180_000,
}, async () => {
  let killedPid: number | null = null;
  const killing: Script = (req, n) => {
    if (n === 1 && killedPid === null) {
      killedPid = localServerPid(envWorkers[0]!);
      if (killedPid) process.kill(killedPid, 'SIGKILL');
    }
    return threeGuesses(req, n);
  };
  const { summary, history } = await run(inputFor(local), killing);
  assert.ok(killedPid, 'the server was running');
  assert.deepEqual([summary.status, summary.reward, summary.turns], ['COMPLETED', 1, 3]);
  const steps = activityCalls(history).filter((c) => c.type === 'openenvStep' && c.outcome === 'completed');
  assert.deepEqual(
    steps.map((c) => (c.result as { replayed: number }).replayed),
    [0, 1, 0],
  );
  assert.notEqual(localServerPid(envWorkers[0]!), killedPid, 'a new server process');
});

test('a rebuilt environment that answers otherwise fails the episode: diverged at step 1', {
  timeout: 180_000,
}, async () => {
  const app = 'tempo_rl_bad_openenv:app';
  let killed: number | null = null;
  const killing: Script = (_req, n) => {
    if (n === 1 && killed === null) {
      // Its server dies while turn 2 is generated: the worker starts another and replays step 1.
      killed = localServerPid(envWorkers[0]!, app);
      if (killed) process.kill(killed, 'SIGKILL');
    }
    return { text: '<tool_call>{"name":"step","arguments":{"message":"hi"}}</tool_call>' };
  };
  const { summary, sample } = await run(
    inputFor([`python_env.openenv.app=${app}`, 'python_env.openenv.observation_field=message'], { mode: 'random' }),
    killing,
  );
  assert.ok(killed, 'the server was running');
  assert.equal(summary.status, 'FAILED');
  assert.match(
    sample.truncated_reason ?? '',
    /EnvironmentDiverged: diverged at step 1: the rebuilt OpenEnv environment answered the recorded action \{"message": "hi"\} with 'feedback /,
  );
});

test('bad input of an OpenEnv environment: each a FAILED episode naming the cause; the worker serves on', {
  timeout: 300_000,
}, async () => {
  const bad = (mode: string): [string[], Record<string, unknown>] => [
    ['python_env.openenv.app=tempo_rl_bad_openenv:app', 'python_env.openenv.observation_field=message'],
    { mode },
  ];
  const say = '<tool_call>{"name":"step","arguments":{"message":"hi"}}</tool_call>';
  const closedPort = await freePort();
  const cases: Array<[string, [string[], Record<string, unknown>], RegExp]> = [
    [
      'an unreachable URL',
      [[`python_env.openenv.url=http://127.0.0.1:${closedPort}`], {}],
      new RegExp(`EnvironmentUnreachable: cannot reach the OpenEnv server at http://127\\.0\\.0\\.1:${closedPort}`),
    ],
    [
      'an app that is not installed',
      [['python_env.openenv.app=tempo_rl_no_such_env:app'], {}],
      /EnvironmentNotInstalled: OpenEnv app 'tempo_rl_no_such_env:app': module 'tempo_rl_no_such_env' is not installed/,
    ],
    [
      'an app that does not start',
      [['python_env.openenv.app=tempo_rl_raw_server:no_such_app'], {}],
      /InvalidEnvironment: OpenEnv app 'tempo_rl_raw_server:no_such_app' exited before it served.*no_such_app/,
    ],
    [
      'a server of another protocol (HTTP only, no /ws session)',
      [['python_env.openenv.app=tempo_rl_raw_server:http_only'], {}],
      /InvalidEnvironment: .* answered HTTP 403 at \/ws: not an OpenEnv 0\.3 server/,
    ],
    [
      'a server that answers with text that is not JSON',
      [['python_env.openenv.app=tempo_rl_raw_server:not_json'], {}],
      /EnvironmentFailed: the OpenEnv server at .* answered reset with something that is not JSON: this is not JSON/,
    ],
    [
      'an environment that raises',
      bad('raises'),
      /EnvironmentFailed: the OpenEnv environment at .* failed step 1 \(EXECUTION_ERROR\): the environment broke on purpose/,
    ],
    [
      'a 3 MB observation',
      bad('huge'),
      /EnvironmentFailed: the OpenEnv server's answer to step 1 is over 1000000 bytes/,
    ],
    [
      'reset arguments the environment refuses',
      [local, { low: 5, high: 1 }],
      /EnvironmentFailed: the OpenEnv environment at .* failed reset \(EXECUTION_ERROR\): need low <= high/,
    ],
    [
      'an observation without the observation field',
      [['python_env.openenv.app=tempo_rl_guess:app', 'python_env.openenv.observation_field=text'], {}],
      /EnvironmentFailed: the observation of reset has no string field 'text'.*its fields: guesses_left, message/,
    ],
    [
      'a text field the action does not have',
      [[...local, 'python_env.openenv.action=text', 'python_env.openenv.text_field=answer'], {}],
      /InvalidEnvironment: python_env\.openenv\.text_field 'answer' is not a field of the environment's action \(its fields: guess\)/,
    ],
  ];
  for (const [what, [sets, args], cause] of cases) {
    const text = sets[0]!.includes('tempo_rl_bad_openenv') ? say : guess(SECRET);
    const { summary, sample } = await run(inputFor([...sets, 'python_env.attempts=1'], args), () => ({ text }));
    assert.equal(summary.status, 'FAILED', what);
    assert.match(sample.truncated_reason ?? '', cause, what);
  }
  const { summary } = await run(inputFor(local), () => ({ text: guess(SECRET) }));
  assert.deepEqual([summary.status, summary.reward], ['COMPLETED', 1], 'nothing else lost: the next episode runs');
});

test('a server that hangs is cut at python_env.openenv.step_timeout_s and, its attempts spent, FAILED', {
  timeout: 120_000,
}, async () => {
  const [sets, args] = [
    ['python_env.openenv.app=tempo_rl_bad_openenv:app', 'python_env.openenv.step_timeout_s=2', 'python_env.attempts=1'],
    { mode: 'hangs' },
  ];
  const started = Date.now();
  const { summary, sample } = await run(inputFor(sets, args), () => ({
    text: '<tool_call>{"name":"step","arguments":{"message":"hi"}}</tool_call>',
  }));
  assert.equal(summary.status, 'FAILED');
  assert.match(
    sample.truncated_reason ?? '',
    /EnvironmentTimeout: the OpenEnv server at .* did not answer step 1 within 2 s/,
  );
  assert.ok(Date.now() - started < 60_000, 'bounded by the step timeout and the attempts');
});
