// The cost of an environment step through the Python environment worker (prints numbers; not a test).
//
// Episodes of Geo3K written as a verifiers environment (workers/environments/tempo_rl_geo3k), each
// two model calls (turn 1 a wrong calc_score call, the environment's feedback, turn 2 the right one),
// through the whole path: the environment worker's harness program, verifiers' interception server,
// the durable gateway's modelCall update, the episode workflow's render and generate on an instant
// engine double (testing/episode-engine-double.ts), on a fresh Temporal dev server. Sequential
// episodes, so each number is one episode's latency on an idle worker. Printed: ms per episode, ms
// per model call (one step of the environment), and the environment worker's CPU per call.
//
//   node --import tsx bench/environment-step.ts [--episodes 8]
// The environment worker's CPU is its own process's; its harness programs' is counted apart (the
// children it waited for).
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { withSets } from '../config/load.js';
import { RolloutConfig } from '../config/schema.js';
import { getEnvironment } from '../lib/env/registry.js';
import { stateLayout } from '../lib/paths.js';
import { pythonEnvSettings } from '../lib/run-plan.js';
import { connectClient } from '../lib/temporal.js';
import { episodeSettings, episodeWorkflowId, type EpisodeInput } from '../protocol/episode.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import { EngineDouble } from '../testing/episode-engine-double.js';
import { startEnvironmentWorker, startRolloutWorker, startTestServer, stopChild } from '../testing/temporal.js';
import { episode } from '../workflows/episode.js';

const { values } = parseArgs({ options: { episodes: { type: 'string', default: '8' } } });
const episodes = Number(values.episodes);

/** CPU of a process, in ms (Linux /proc; clock ticks of 10 ms): its own (utime + stime) and that of
 *  its children it waited for (cutime + cstime: the harness programs). */
function cpuMs(pid: number): { own: number; children: number } {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ').map(Number);
  return { own: (f[11]! + f[12]!) * 10, children: (f[13]! + f[14]!) * 10 };
}

const call = (answer: string) => `<tool_call>{"name":"calc_score","arguments":{"answer":"${answer}"}}</tool_call>`;
const server = await startTestServer();
const store = new LocalBlobStore(stateLayout(server.cfg.state_dir).blobs);
const calls = new Map<string, number>();
const engine = new EngineDouble((req) => {
  const n = calls.get(req.session_id) ?? 0;
  calls.set(req.session_id, n + 1);
  return { text: n === 0 ? call('7') : call('60') };
});
const rollout = await startRolloutWorker(server.cfg, {
  cfg: server.cfg,
  store,
  engines: () => engine,
  imageProcessor: null,
});
const envWorker = await startEnvironmentWorker(server.cfg);
const client = await connectClient(server.cfg);
const cfg = withSets(server.cfg, ['rollout.environment=verifiers', 'python_env.id=tempo_rl_geo3k']);
cfg.python_env.args = { rows: [{ problem: 'Find the angle x.', answer: '60' }] };
const settings = episodeSettings(
  RolloutConfig.parse({ environment: 'verifiers', max_turns: 3, max_response_len: 600 }),
  { env: getEnvironment('verifiers'), python_env: pythonEnvSettings(cfg)!, generate_timeout_s: 30 },
);
const runOne = async (i: number) => {
  const input: EpisodeInput = {
    run_id: 'bench-env',
    step: 0,
    prompt_index: i,
    sample_index: 0,
    prompt: { messages: [], tools: [] },
    label: '0',
    settings,
    weight_version: 0,
  };
  return client.workflow.execute(episode, {
    taskQueue: server.cfg.temporal.task_queues.rollout,
    workflowId: episodeWorkflowId(`bench-env/0/${i}/0`),
    args: [input],
  });
};
try {
  await runOne(1_000_000); // the first episode loads the environment and prepares the harness program
  const times: number[] = [];
  const cpu0 = cpuMs(envWorker.pid!);
  for (let i = 0; i < episodes; i++) {
    const t = performance.now();
    const summary = await runOne(i);
    if (summary.turns !== 2 || summary.reward !== 1) throw new Error(`unexpected episode ${JSON.stringify(summary)}`);
    times.push(performance.now() - t);
  }
  const cpu1 = cpuMs(envWorker.pid!);
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)]!;
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  const modelCalls = episodes * 2;
  console.log(
    JSON.stringify({
      episodes,
      model_calls: modelCalls,
      episode_ms_median: Math.round(median),
      episode_ms_mean: Math.round(mean),
      ms_per_model_call: Math.round((mean * episodes) / modelCalls),
      environment_worker_cpu_ms_per_call: Math.round((cpu1.own - cpu0.own) / modelCalls),
      harness_programs_cpu_ms_per_call: Math.round((cpu1.children - cpu0.children) / modelCalls),
      note: 'the harness program of verifiers is a process per segment (one per model call of a feedback loop); the engine is an instant double',
    }),
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
