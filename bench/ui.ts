// tempo-rl ui on a large run: builds a GRPO run of 10,000 episodes directly on disk (step records and
// sample blobs as a run writes them, no engine, no Temporal server), serves it, and prints the time of
// each page's API call (the first call, which reads the step's samples, and the median of the next
// ones) and of each page's load in the browser (navigation until the page has drawn its data).
//
//   node --import tsx bench/ui.ts [--steps 50] [--prompts 25] [--samples 8] [--turns 3] [--keep]
//
// The episode page has no history here (no Temporal server): it shows the sample's turns and tokens.
// The page loads need Debian's chromium (/usr/bin/chromium); without it only the API times print.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { loadConfig } from '../config/load.js';
import type { Sample } from '../lib/contract.js';
import { rasterize, syntheticProblems } from '../lib/data/index.js';
import { stateLayout } from '../stores/layout.js';
import type { StepRecord } from '../protocol/activities.js';
import { LocalBlobStore, writeFileAtomic } from '../stores/blobstore.js';
import { decode, encode, toolCall } from '../testing/episode-engine-double.js';
import { startUi } from '../ui/server.js';
import { TemporalGate } from '../ui/temporal-gate.js';
import { CHROMIUM, CHROMIUM_ARGS } from '../testing/chromium.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '50' },
    prompts: { type: 'string', default: '25' },
    samples: { type: 'string', default: '8' },
    turns: { type: 'string', default: '3' },
    keep: { type: 'boolean', default: false },
  },
});
const [STEPS, PROMPTS, SAMPLES, TURNS] = [values.steps, values.prompts, values.samples, values.turns].map(Number) as [
  number,
  number,
  number,
  number,
];
const RUN = 'bench';

/** One sample as the store step writes it: each turn a calc_score call, the feedback after it. */
function sampleOf(step: number, prompt: number, sample: number, label: string, image: string): Sample {
  const turns: Sample['turns'] = [];
  const ids: number[] = [];
  const mask: Array<0 | 1> = [];
  const logprobs: number[] = [];
  const right = (step + prompt + sample) % 3 === 0;
  const nTurns = right ? 1 : TURNS;
  for (let t = 0; t < nTurns; t++) {
    const answer = right || t === nTurns - 1 ? label : String(7 + t);
    const text = toolCall(answer).replace(/ trailing text.*$/, '');
    const gen = encode(`Let me look at the figure again, turn ${t}. ${text}`);
    const obs = t < nTurns - 1 ? encode(`\n<|im_start|>user\ncalc_score: the answer ${answer} is incorrect.\n`) : [];
    ids.push(...gen, ...obs);
    mask.push(...gen.map(() => 1 as const), ...obs.map(() => 0 as const));
    logprobs.push(...gen.map((_, i) => -((i * 0.37 + sample) % 4)), ...obs.map(() => 0));
    turns.push({
      engine: 'http://engine-0',
      weight_version: step,
      generated_tokens: gen.length,
      observation_tokens: obs.length,
      finish_reason: 'stop',
      tool_answer: answer,
      tool_score: answer === label ? 1 : 0,
    });
  }
  return {
    schema_version: 1,
    episode_id: `${RUN}/${step}/${prompt}/${sample}`,
    run_id: RUN,
    step,
    prompt_index: prompt,
    sample_index: sample,
    group_id: `${RUN}/${step}/${prompt}`,
    prompt_ids: encode(`<|im_start|>user\nFind the angle. ${'Look at the diagram. '.repeat(12)}`),
    response_ids: ids,
    loss_mask: mask,
    rollout_logprobs: logprobs,
    images: [image],
    reward: right ? 1 : 0,
    status: 'COMPLETED',
    truncated_reason: null,
    temperature: 1,
    label,
    environment: 'geo3k',
    turns,
    routed_experts: null,
  };
}

async function buildRun(stateDir: string, store: LocalBlobStore): Promise<number> {
  const problems = syntheticProblems(PROMPTS, 7, 'angle_facts');
  const images = await Promise.all(problems.map(async (p) => store.putBytes(await rasterize(p.svg), 'png')));
  let episodes = 0;
  for (let step = 0; step < STEPS; step++) {
    const rec: StepRecord = {
      run_id: RUN,
      step,
      metrics: {},
      weight_version: step + 1,
      episodes: [],
      data_before: { epoch: 0, cursor: step * PROMPTS },
      data_after: { epoch: 0, cursor: (step + 1) * PROMPTS },
    };
    let rewardSum = 0;
    for (let p = 0; p < PROMPTS; p++) {
      const group = Array.from({ length: SAMPLES }, (_, s) => sampleOf(step, p, s, problems[p]!.answer, images[p]!));
      await Promise.all(group.map((s) => store.putJson(`samples/${s.episode_id}.json`, s)));
      const allEqual = group.every((s) => s.reward === group[0]!.reward);
      for (const s of group) rec.episodes.push({ episode_id: s.episode_id, trained: !allEqual });
      rewardSum += group.reduce((a, s) => a + s.reward, 0);
      episodes += group.length;
    }
    rec.metrics = {
      'rollout/raw_reward': rewardSum / (PROMPTS * SAMPLES),
      'rollout/response_len': 120 + (step % 7),
      'train/pg_loss': 0.1 / (step + 1),
      'perf/rollout_time': 20 + (step % 5),
      'perf/train_time': 10,
      'perf/weight_sync_time': 2,
      'perf/step_time': 32 + (step % 5),
      ...(step === 0 ? { 'eval_start/reward': 0.2 } : {}),
      ...(step === STEPS - 1 ? { 'eval/reward': 0.6 } : {}),
    };
    const file = path.join(stateLayout(stateDir).runs, RUN, 'steps', `step-${String(step).padStart(6, '0')}.json`);
    await writeFileAtomic(file, JSON.stringify(rec));
  }
  return episodes;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timeGet(url: string): Promise<{ ms: number; bytes: number }> {
  const t0 = performance.now();
  const res = await fetch(url);
  const body = await res.arrayBuffer();
  if (!res.ok) throw new Error(`${url}: ${res.status} ${Buffer.from(body).toString()}`);
  return { ms: performance.now() - t0, bytes: body.byteLength };
}

const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-bench-ui-'));
const cfg = loadConfig({ env: {}, sets: [`state_dir=${stateDir}`] });
const store = new LocalBlobStore(stateLayout(stateDir).blobs);
let t0 = performance.now();
const episodes = await buildRun(stateDir, store);
console.log(
  `built ${episodes} episodes in ${STEPS} steps on disk in ${((performance.now() - t0) / 1000).toFixed(1)} s (${stateDir})`,
);

const ui = await startUi(
  {
    cfg,
    temporal: new TemporalGate(null),
    store,
    decoder: () => ({ piece: (id) => decode([id]), text: decode }),
    temporalUi: null,
  },
  { host: '127.0.0.1', port: 0 },
);
const mid = Math.floor(STEPS / 2);
const episode = `${RUN}/${mid}/3/2`;
const pages: Array<{ name: string; api: string; hash: string }> = [
  { name: 'runs list', api: 'api/runs', hash: '#/' },
  { name: 'run', api: `api/runs/${RUN}`, hash: `#/run?id=${RUN}` },
  { name: `step ${mid}`, api: `api/runs/${RUN}/steps/${mid}`, hash: `#/step?run=${RUN}&step=${mid}` },
  {
    name: 'search (reward ≥ 1, text "turn 0")',
    api: `api/runs/${RUN}/episodes?reward_min=1&text=${encodeURIComponent('turn 0')}&limit=50`,
    hash: `#/search?run=${RUN}&reward_min=1&text=${encodeURIComponent('turn 0')}`,
  },
  {
    name: 'an episode',
    api: `api/episode?id=${encodeURIComponent(episode)}`,
    hash: `#/episode?id=${encodeURIComponent(episode)}`,
  },
];
try {
  console.log('\nAPI (ms): first call, median of the next 5, response size');
  for (const p of pages) {
    const first = await timeGet(ui.url + p.api);
    const next: number[] = [];
    for (let i = 0; i < 5; i++) next.push((await timeGet(ui.url + p.api)).ms);
    console.log(
      `  ${p.name.padEnd(36)} ${first.ms.toFixed(1).padStart(8)} ${median(next).toFixed(1).padStart(8)}  ${(first.bytes / 1024).toFixed(1)} KiB`,
    );
  }
  if (!existsSync(CHROMIUM)) console.log(`\nno browser at ${CHROMIUM}: no page loads`);
  else {
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: CHROMIUM_ARGS,
    });
    try {
      console.log('\npage load in the browser (ms, navigation until drawn): first, median of the next 3');
      for (const p of pages) {
        const times: number[] = [];
        for (let i = 0; i < 4; i++) {
          const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
          t0 = performance.now();
          await page.goto(ui.url + p.hash);
          await page.waitForSelector('main[data-ready]', { timeout: 60_000 });
          times.push(performance.now() - t0);
          if ((await page.getAttribute('main', 'data-ready')) === 'error')
            throw new Error(`${p.name}: ${await page.textContent('main')}`);
          await page.close();
        }
        console.log(
          `  ${p.name.padEnd(36)} ${times[0]!.toFixed(0).padStart(8)} ${median(times.slice(1)).toFixed(0).padStart(8)}`,
        );
      }
    } finally {
      await browser.close();
    }
  }
} finally {
  await ui.close();
  if (!values.keep) rmSync(stateDir, { recursive: true, force: true });
}
