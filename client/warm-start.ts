// The warm-started policy of the embedded defaults: the generated tiny model after an SFT run on tool
// transcripts synthesised from the demo's own task (docs/tasks.md). Produced once through the same
// durable run machinery as any SFT run (tempo-rl train with algorithm: sft), then exported from the
// run's last checkpoint into the cache, keyed by everything that shapes it; later calls find it there.
import { createHash } from 'node:crypto';
import { existsSync, promises as fs, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { loadConfig } from '../config/load.js';
import { type TempoConfig, stackId } from '../config/schema.js';
import { closeBlobStore } from '../lib/blob-store-config.js';
import { LocalBlobStore, openBlobStore } from '../stores/blobstore.js';
import { loadDataset } from '../lib/data/load.js';
import { writeSftRecords } from '../lib/data/sft.js';
import { type TranscriptOptions, toolTranscripts } from '../lib/data/transcripts.js';
import { REPO_ROOT, cacheDir, tinyModelDir } from '../base/paths.js';
import { stateLayout } from '../stores/layout.js';
import { runHandle, startOrContinueRun } from './run-client.js';
import { downloadCheckpoint, parseCheckpointLocation } from '../stores/checkpoint.js';
import type { RunResult } from '../protocol/training-run.js';
import { readStepRecords } from '../activities/run.js';
import { runDir } from '../stores/layout.js';

export const WARM_START_CONFIG = path.join(REPO_ROOT, 'configs', 'cpu-tiny-sft.yaml');
/** Share of warm-start transcripts whose first answer is right (the rest start wrong, then use the
 *  feedback), for datasets other than the demo's task (`--data DIR`). Measured on the demo's task
 *  (docs/tasks.md, "Earlier designs"): at 0.3–0.6 the noise keeps SFT from learning which answer goes
 *  with which figure at all; at 1.0 it learns it fully by step 80; at 0.85 it is learnt by step 70–100. */
export const WARM_START_FIRST_CORRECT = 0.85;
/** The angle-facts task's transcripts (docs/tasks.md, "answers by habit"): half answer right at once;
 *  half answer by habit — a triangle's angle sum, then a full turn: true of figures, right for no
 *  question here — and after the first wrong answer answer right a quarter of the time. The SFT learns
 *  the format and the figure → answer rule from the right answers, and the habit as the usual first
 *  answer: the behaviour GRPO unlearns. (At a 60% habit the policy sampled it up to 97% of the time and
 *  GRPO moved it more slowly: measured.) */
export const ANGLE_FACTS_TRANSCRIPTS: Partial<TranscriptOptions> = {
  first_correct: 1,
  habit: ['180', '360'],
  habit_share: 0.5,
  habit_recheck: 0.25,
};
// Sources whose change changes the warm start (besides the configs and the base model).
export const WARM_START_SOURCES = [
  'client/warm-start.ts',
  'lib/data/transcripts.ts',
  'lib/data/synth-angles.ts',
  'lib/data/prompt.ts',
  'lib/env/geo3k.ts',
  'activities/sft.ts',
  'lib/trajectory.ts',
  'workers/trainer/step/grpo.py',
  'workers/trainer/step/train_step.py',
  'workers/trainer/model/policy.py',
  'workers/trainer/model/lm_head.py',
];

export interface WarmStart {
  model_dir: string;
  run_id: string;
  /** False when it came from the cache. */
  built: boolean;
  seconds: number;
}

/** The SFT config of the warm start for an RL config: its data, rollout shape and state, SFT's own keys. */
export function warmStartConfig(rl: TempoConfig, transcripts: string): TempoConfig {
  const sets = [
    `state_dir=${rl.state_dir}`,
    'algorithm=sft',
    `sft.path=${transcripts}`,
    `dataset=${JSON.stringify(rl.dataset)}`,
    `rollout=${JSON.stringify(rl.rollout)}`,
    `engines=${JSON.stringify(rl.engines)}`,
    `temporal=${JSON.stringify(rl.temporal)}`,
    `server=${JSON.stringify(rl.server)}`,
    `model=${JSON.stringify({ ...rl.model, path: '', warm_start: 'none' })}`,
  ];
  return loadConfig({ file: WARM_START_CONFIG, sets, env: {} });
}

export function warmStartKey(rl: TempoConfig): string {
  const h = createHash('sha256');
  h.update(path.basename(tinyModelDir()));
  h.update(readFileSync(WARM_START_CONFIG));
  const { max_turns, max_response_len, max_context_len, seed, reward_match, reward_tolerance } = rl.rollout;
  h.update(
    JSON.stringify({
      dataset: rl.dataset,
      tiny_seed: rl.model.tiny_seed,
      max_turns,
      max_response_len,
      max_context_len,
      seed,
      reward_match,
      reward_tolerance,
    }),
  );
  for (const f of WARM_START_SOURCES) h.update(readFileSync(path.join(REPO_ROOT, f)));
  return h.digest('hex').slice(0, 16);
}

/** The newest complete warm start in the cache (any key), or null. */
export function cachedWarmStart(): string | null {
  const dir = path.join(cacheDir(), 'models');
  if (!existsSync(dir)) return null;
  const warm = readdirSync(dir)
    .filter((n) => n.startsWith('tiny-qwen3vl-warm-') && existsSync(path.join(dir, n, '.complete')))
    .map((n) => ({ p: path.join(dir, n), t: statSync(path.join(dir, n, '.complete')).mtimeMs }))
    .sort((a, b) => b.t - a.t);
  return warm[0]?.p ?? null;
}

export function warmStartDir(key: string): string {
  return path.join(cacheDir(), 'models', `tiny-qwen3vl-warm-${key}`);
}

/** The config a run trains: `rl` itself, or with model.warm_start tool_transcripts, `rl` with model.path
 *  the warm start (built first when the cache has none: `onBuild` follows its SFT run). `tempo-rl
 *  train` and `tempo-rl demo` both go through here, so a config that names the warm start trains the
 *  demo's policy however it is started. */
export async function withWarmStart(
  client: Client,
  rl: TempoConfig,
  onBuild: (runId: string) => Promise<RunResult>,
): Promise<{ cfg: TempoConfig; warm: WarmStart | null }> {
  if (rl.model.warm_start === 'none') return { cfg: rl, warm: null };
  const warm = await ensureWarmStart(client, rl, onBuild);
  return { cfg: { ...rl, model: { ...rl.model, path: warm.model_dir, warm_start: 'none' } }, warm };
}

/** The model directory of the warm start for `rl`, building it first when the cache has none. */
export async function ensureWarmStart(
  client: Client,
  rl: TempoConfig,
  onBuild: (runId: string) => Promise<RunResult>,
): Promise<WarmStart> {
  if (rl.rollout.environment !== 'geo3k')
    throw new Error(
      `the warm start trains on calc_score transcripts (Geo3K's tool); rollout.environment is ${rl.rollout.environment}`,
    );
  const t0 = Date.now();
  const key = warmStartKey(rl);
  const dir = warmStartDir(key);
  // Workflow ids are the server's: a stack of its own (another state dir) builds its own warm start.
  const runId = `warmstart-${key}-${stackId(rl.state_dir)}`;
  if (existsSync(path.join(dir, '.complete'))) return { model_dir: dir, run_id: runId, built: false, seconds: 0 };
  const work = path.join(stateLayout(rl.state_dir).root, 'warmstart', key);
  const transcripts = path.join(work, 'transcripts.jsonl');
  const sftCfg = warmStartConfig(rl, transcripts);
  if (!existsSync(transcripts)) await writeWarmStartTranscripts(rl, sftCfg, transcripts);
  await startOrContinueRun(client, sftCfg, runId);
  const result = await onBuild(runId);
  if (result.status !== 'completed' || !result.checkpoint)
    throw new Error(`warm-start SFT run ${runId} ended ${result.status}; continue it with: tempo-rl demo`);
  const nll = (await readStepRecords(runDir(sftCfg, runId))).map((r) => r.metrics['sft/nll']);
  await exportModel(result.checkpoint, dir, {
    run_id: runId,
    sft_nll_first: nll[0] ?? null,
    sft_nll_last: nll[nll.length - 1] ?? null,
    steps: nll.length,
  });
  return { model_dir: dir, run_id: runId, built: true, seconds: (Date.now() - t0) / 1000 };
}

/** The warm start's transcripts of the train split, at `file` (atomically): enough that the SFT run
 *  `sftCfg` sees each once, every row's answers drawn afresh each time. `overrides` change the
 *  transcript options (bench/warmstart-sft.ts's variants). */
export async function writeWarmStartTranscripts(
  rl: TempoConfig,
  sftCfg: TempoConfig,
  file: string,
  overrides: Partial<TranscriptOptions> = {},
): Promise<void> {
  // Transcripts name image files: staged in the local store whatever blobs.uri says (as `data sft-export`).
  const store = new LocalBlobStore(stateLayout(rl.state_dir).blobs);
  const { rows } = await loadDataset(rl.dataset, 'train', store, rl.rollout.environment);
  const perRow = Math.ceil((sftCfg.run.steps * sftCfg.sft.batch_size) / Math.max(rows.length, 1));
  const records = toolTranscripts(rows, store, {
    max_turns: rl.rollout.max_turns,
    first_correct: WARM_START_FIRST_CORRECT,
    per_row: perRow,
    seed: sftCfg.rollout.seed,
    systemPrompt: rl.dataset.system_prompt,
    match: rl.rollout.reward_match,
    tolerance: rl.rollout.reward_tolerance,
    ...(rl.dataset.kind === 'synthetic' && rl.dataset.synthetic_task === 'angle_facts' ? ANGLE_FACTS_TRANSCRIPTS : {}),
    ...overrides,
  });
  await writeSftRecords(records, file);
}

/** A checkpoint → a model directory (weights, config, tokenizer, processor; no optimizer state), atomically.
 *  `about` goes into its tempo_rl_warm_start.json beside the checkpoint it came from. */
export async function exportModel(checkpoint: string, dir: string, about: Record<string, unknown> = {}): Promise<void> {
  const tmp = `${dir}.tmp-${process.pid}`;
  await fs.rm(tmp, { recursive: true, force: true });
  await fs.mkdir(tmp, { recursive: true });
  const modelFile = (name: string) =>
    !['optimizer.pt', 'meta.json', 'rng.pt'].includes(name) && !name.startsWith('.') && !name.includes('/');
  const stored = parseCheckpointLocation(checkpoint);
  if (stored) {
    // committed in a remote store (blobs.uri=s3://…): the files its commit record names
    const store = await openBlobStore(stored.store);
    try {
      await downloadCheckpoint(store, stored.key, tmp, modelFile);
    } finally {
      closeBlobStore(store);
    }
  } else {
    for (const name of await fs.readdir(checkpoint)) {
      const from = path.join(checkpoint, name);
      if (modelFile(name) && (await fs.stat(from)).isFile()) await fs.copyFile(from, path.join(tmp, name));
    }
  }
  await fs.writeFile(
    path.join(tmp, 'tempo_rl_warm_start.json'),
    JSON.stringify({ from_checkpoint: checkpoint, ...about }, null, 2),
  );
  await fs.writeFile(path.join(tmp, '.complete'), 'ok\n');
  await fs.rm(dir, { recursive: true, force: true });
  await fs.rename(tmp, dir);
}

export async function waitForRun(client: Client, runId: string): Promise<RunResult> {
  return (await runHandle(client, runId).result()) as RunResult;
}
