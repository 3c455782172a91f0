// The cost of an environment step through the Python environment worker (prints numbers; not a test).
//
// --environment verifiers (the default): episodes of Geo3K written as a verifiers environment
// (workers/environments/tempo_rl_geo3k), each two model calls (turn 1 a wrong calc_score call, the
// environment's feedback, turn 2 the right one), through the whole path: the environment worker's
// harness program, verifiers' interception server, the durable gateway's modelCall update, the
// episode workflow's render and generate on an instant engine double
// (testing/episode-engine-double.ts). Printed: ms per episode, ms per model call (one step of the
// environment), and the environment worker's CPU per call; its harness programs' CPU is counted apart
// (the children it waited for).
//
// --environment openenv: episodes of guess the number, an OpenEnv server (workers/environments/
// tempo_rl_guess) the worker runs as a local process, each three turns (guesses 50, 25, then the
// number: two steps answered "lower", the third done), the workflow stepping the server through the
// worker after each generate. Printed: ms per turn, ms per step activity (scheduled to completed:
// the dispatch, the worker, the server's step and its state read), and the CPU per step of the
// worker and of the server.
//
// Both on a fresh Temporal dev server, sequential episodes: each number is one episode's latency on an
// idle worker.
//
//   node --import tsx bench/environment-step.ts [--episodes 8] [--environment verifiers|openenv]
import { readdirSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { withSets } from '../config/load.js';
import { RolloutConfig } from '../config/schema.js';
import { getEnvironment } from '../lib/env/registry.js';
import { stateLayout } from '../stores/layout.js';
import { initialRunState, pythonEnvSettings } from '../config/run-plan.js';
import { connectClient } from '../supervise/temporal.js';
import { episodeSettings, episodeWorkflowId, type EpisodeInput, type EpisodeSettings } from '../protocol/episode.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import { EngineDouble } from '../testing/episode-engine-double.js';
import { startEnvironmentWorker, startRolloutWorker, startTestServer, stopChild } from '../testing/temporal.js';
import { episode } from '../workflows/episode.js';

const { values } = parseArgs({
  options: { episodes: { type: 'string', default: '8' }, environment: { type: 'string', default: 'verifiers' } },
});
const episodes = Number(values.episodes);
const openenv = values.environment === 'openenv';
if (!openenv && values.environment !== 'verifiers')
  throw new Error(`--environment ${values.environment}: verifiers or openenv`);

/** CPU of a process, in ms (Linux /proc; clock ticks of 10 ms): its own (utime + stime) and that of
 *  its children it waited for (cutime + cstime: the harness programs). */
function cpuMs(pid: number): { own: number; children: number } {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ').map(Number);
  return { own: (f[11]! + f[12]!) * 10, children: (f[13]! + f[14]!) * 10 };
}

/** The worker's child serving uvicorn (the local OpenEnv server). */
function serverPid(worker: number): number {
  for (const task of readdirSync(`/proc/${worker}/task`))
    for (const pid of readFileSync(`/proc/${worker}/task/${task}/children`, 'utf8').split(' ').filter(Boolean))
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('uvicorn')) return Number(pid);
  throw new Error('the environment worker runs no OpenEnv server');
}

/** ms from each openenvStep's scheduling to its completion, from an episode's history. */
function stepMs(history: History): number[] {
  const scheduled = new Map<string, number>();
  const out: number[] = [];
  const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) =>
    Number(t?.seconds ?? 0) * 1000 + (t?.nanos ?? 0) / 1e6;
  for (const ev of history.events ?? []) {
    const sched = ev.activityTaskScheduledEventAttributes;
    if (sched?.activityType?.name === 'openenvStep') scheduled.set(String(ev.eventId), ms(ev.eventTime));
    const done = ev.activityTaskCompletedEventAttributes;
    const at = done ? scheduled.get(String(done.scheduledEventId)) : undefined;
    if (at !== undefined) out.push(ms(ev.eventTime) - at);
  }
  return out;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

const call = (answer: string) => `<tool_call>{"name":"calc_score","arguments":{"answer":"${answer}"}}</tool_call>`;
const guess = (n: number) => `<tool_call>{"name":"step","arguments":{"guess":${n}}}</tool_call>`;
/** random.Random(1).randint(1, 100): guess the number's number for seed 1 (row "1"). */
const GUESSES = [50, 25, 18];
const server = await startTestServer();
const store = new LocalBlobStore(stateLayout(server.cfg.state_dir).blobs);
const calls = new Map<string, number>();
const engine = new EngineDouble((req) => {
  const n = calls.get(req.session_id) ?? 0;
  calls.set(req.session_id, n + 1);
  return { text: openenv ? guess(GUESSES[n] ?? 18) : n === 0 ? call('7') : call('60') };
});
const rollout = await startRolloutWorker(server.cfg, {
  cfg: server.cfg,
  store,
  engines: () => engine,
  imageProcessor: null,
});
const envWorker = await startEnvironmentWorker(server.cfg);
const client = await connectClient(server.cfg);

function settingsFor(): { settings: EpisodeSettings; label: string; turns: number } {
  if (openenv) {
    const cfg = withSets(server.cfg, [
      'rollout.environment=openenv',
      'rollout.max_turns=4',
      'rollout.max_response_len=600',
      'python_env.openenv.app=tempo_rl_guess:app',
      'python_env.openenv.observation_field=message',
    ]);
    return { settings: initialRunState(cfg, 'bench-env').plan.episode, label: '1', turns: 3 };
  }
  const cfg = withSets(server.cfg, ['rollout.environment=verifiers', 'python_env.id=tempo_rl_geo3k']);
  cfg.python_env.args = { rows: [{ problem: 'Find the angle x.', answer: '60' }] };
  const settings = episodeSettings(
    RolloutConfig.parse({ environment: 'verifiers', max_turns: 3, max_response_len: 600 }),
    { env: getEnvironment('verifiers'), python_env: pythonEnvSettings(cfg)!, generate_timeout_s: 30 },
  );
  return { settings, label: '0', turns: 2 };
}
const { settings, label, turns } = settingsFor();

const runOne = async (i: number) => {
  const input: EpisodeInput = {
    run_id: 'bench-env',
    step: 0,
    prompt_index: i,
    sample_index: 0,
    prompt: { messages: [], tools: [] },
    label,
    settings,
    weight_version: 0,
  };
  const workflowId = episodeWorkflowId(`bench-env/0/${i}/0`);
  const summary = await client.workflow.execute(episode, {
    taskQueue: server.cfg.temporal.task_queues.rollout,
    workflowId,
    args: [input],
  });
  return { summary, history: openenv ? await client.workflow.getHandle(workflowId).fetchHistory() : null };
};
try {
  // The first episode loads the environment: the harness program, or the OpenEnv client and server.
  await runOne(1_000_000);
  const times: number[] = [];
  const steps: number[] = [];
  const server0 = openenv ? cpuMs(serverPid(envWorker.pid!)).own : 0;
  const cpu0 = cpuMs(envWorker.pid!);
  for (let i = 0; i < episodes; i++) {
    const t = performance.now();
    const { summary, history } = await runOne(i);
    times.push(performance.now() - t);
    if (summary.turns !== turns || summary.reward !== 1)
      throw new Error(`unexpected episode ${JSON.stringify(summary)}`);
    if (history) steps.push(...stepMs(history));
  }
  const cpu1 = cpuMs(envWorker.pid!);
  const perStep = episodes * turns;
  const common = {
    episodes,
    episode_ms_median: Math.round(median(times)),
    episode_ms_mean: Math.round(mean(times)),
  };
  console.log(
    JSON.stringify(
      openenv
        ? {
            environment: 'openenv (tempo_rl_guess, a local server)',
            ...common,
            steps: perStep,
            ms_per_turn: Math.round((mean(times) * episodes) / perStep),
            step_activity_ms_median: Math.round(median(steps)),
            step_activity_ms_mean: Math.round(mean(steps)),
            environment_worker_cpu_ms_per_step: Math.round((cpu1.own - cpu0.own) / perStep),
            server_cpu_ms_per_step: Math.round((cpuMs(serverPid(envWorker.pid!)).own - server0) / perStep),
            note: 'a turn is a generate on an instant engine double, the step activity and the observation render; a step activity is the worker sending the action and reading the state',
          }
        : {
            environment: 'verifiers (tempo_rl_geo3k)',
            ...common,
            model_calls: perStep,
            ms_per_model_call: Math.round((mean(times) * episodes) / perStep),
            environment_worker_cpu_ms_per_call: Math.round((cpu1.own - cpu0.own) / perStep),
            harness_programs_cpu_ms_per_call: Math.round((cpu1.children - cpu0.children) / perStep),
            note: 'the harness program of verifiers is a process per segment (one per model call of a feedback loop); the engine is an instant double',
          },
    ),
  );
} finally {
  await stopChild(envWorker);
  await client.connection.close();
  await rollout.stop();
  await server.stop();
  // The Temporal runtime may keep the process up after its last worker (the suite runs its files with
  // --test-force-exit for the same reason).
  setTimeout(() => process.exit(), 2_000).unref();
}
