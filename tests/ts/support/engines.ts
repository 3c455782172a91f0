// Live vLLM engines for a test file: the suite's engines when TEMPO_RL_TEST_ENGINE_URLS is set (the
// test runner starts them once), else engines started here in a temp state directory and stopped after.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { loadConfig } from '../../../config/load.js';
import { startEngines, stopEngines } from '../../../lib/engines.js';
import { REPO_ROOT, cacheDir, pythonBin, tinyModelDir } from '../../../lib/paths.js';
import { portOpen } from '../../../lib/process.js';
import { removeTestState } from './state.js';

export interface TestEngines {
  urls: string[];
  /** True when this file started them (and stop() ends them). */
  owned: boolean;
  stop(): Promise<void>;
}

async function freeRun(count: number): Promise<number> {
  for (let base = 8170; base + count <= 8199; base++) {
    const taken = await Promise.all(Array.from({ length: count }, (_, i) => portOpen('127.0.0.1', base + i, 300)));
    if (!taken.some(Boolean)) return base;
  }
  throw new Error('no free port run in 8170-8199');
}

export async function testEngines(count = 2): Promise<TestEngines> {
  const fromEnv = (process.env.TEMPO_RL_TEST_ENGINE_URLS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (fromEnv.length >= count) return { urls: fromEnv.slice(0, count), owned: false, stop: async () => {} };
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-engines-'));
  const env = { ...process.env };
  delete env.TEMPO_RL__ENGINES__URLS;
  const cfg = loadConfig({ env, sets: [`state_dir=${stateDir}`, `engines.count=${count}`, `engines.base_port=${await freeRun(count)}`, 'engines.urls=[]'] });
  try {
    const { statuses } = await startEngines(cfg);
    return { urls: statuses.map((s) => s.url), owned: true, stop: async () => { await stopEngines(cfg); removeTestState(stateDir); } };
  } catch (err) {
    await stopEngines(cfg);
    removeTestState(stateDir);
    throw err;
  }
}

/** The tiny model with another seed (changed weights for reload tests); generated once, cached. */
export function changedWeightsDir(): string {
  const dir = path.join(cacheDir(), 'models', `${path.basename(tinyModelDir())}-seed1`);
  if (existsSync(path.join(dir, '.complete'))) return dir;
  const env = { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers') };
  const res = spawnSync(pythonBin(), ['-m', 'trainer.tiny_model', '--out', dir, '--seed', '1'], { cwd: REPO_ROOT, env, stdio: 'inherit' });
  if (res.status !== 0) throw new Error('could not generate the seed-1 tiny model');
  return dir;
}

export const IMAGE_PAD_ID = 151655;
export const IM_END_ID = 151645;

/** A PNG data URL; 128×64 is 4×2 merged 32-pixel patches: 8 image tokens for the tiny model. */
export async function pngDataUrl(width = 128, height = 64): Promise<string> {
  const png = await sharp({ create: { width, height, channels: 3, background: { r: 200, g: 40, b: 40 } } }).png().toBuffer();
  return `data:image/png;base64,${png.toString('base64')}`;
}

export const CALC_SCORE_TOOL = {
  type: 'function' as const,
  function: {
    name: 'calc_score',
    description: 'Check an answer',
    parameters: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] },
  },
};
