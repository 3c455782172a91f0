// Live vLLM engines for a test file: the suite's engines when TEMPO_RL_TEST_ENGINE_URLS is set (the
// test runner starts them once), else engines started here in a temp state directory and stopped after.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { z } from 'zod';
import { loadConfig } from '../config/load.js';
import { readEngineRecords, startEngines, stopEngines } from '../supervise/engines.js';
import { REPO_ROOT, cacheDir, pythonBin, tinyModelDir } from '../base/paths.js';
import { isAlive, portOpen } from '../supervise/process.js';
import { removeTestState } from './state.js';

export interface TestEngines {
  urls: string[];
  /** True when this file started them (and stop() ends them; for the suite's shared ones it restores the tiny model). */
  owned: boolean;
  stop(): Promise<void>;
  /** Engines started here only: their pids, and a restart of the dead ones (waits until healthy). */
  pids?(): number[];
  restart?(): Promise<void>;
}

/** Claims a port for this process until released: a file per port in the machine's /tmp (not the
 *  suite's own TMPDIR), so that two test runs on one machine never pick the same free port while
 *  their engines (tens of seconds to bind) start. */
const PORT_CLAIMS = '/tmp';
function claimPort(port: number): boolean {
  const file = path.join(PORT_CLAIMS, `tempo-rl-test-port-${port}`);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      return true;
    } catch {
      const owner = Number(readFileSync(file, 'utf8'));
      if (owner === process.pid || isAlive(owner)) return false;
      rmSync(file, { force: true }); // its owner is gone
    }
  }
  return false;
}

function releasePorts(base: number, count: number): void {
  for (let i = 0; i < count; i++) rmSync(path.join(PORT_CLAIMS, `tempo-rl-test-port-${base + i}`), { force: true });
}

async function freeRun(count: number): Promise<number> {
  for (let base = 8170; base + count <= 8199; base++) {
    const taken = await Promise.all(Array.from({ length: count }, (_, i) => portOpen('127.0.0.1', base + i, 300)));
    if (taken.some(Boolean)) continue;
    const claimed = Array.from({ length: count }, (_, i) => base + i).filter(claimPort);
    if (claimed.length === count) return base;
    for (const p of claimed) releasePorts(p, 1);
  }
  throw new Error('no free port run in 8170-8199');
}

/** `own`: always engines started here (a test that kills them must not touch the suite's); `sets`: more
 *  config for engines started here (and implies `own`). */
export async function testEngines(count = 2, opts: { own?: boolean; sets?: string[] } = {}): Promise<TestEngines> {
  const fromEnv =
    opts.own || opts.sets
      ? []
      : (process.env.TEMPO_RL_TEST_ENGINE_URLS ?? '')
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
  if (fromEnv.length >= count) {
    const urls = fromEnv.slice(0, count);
    // The suite's engines are shared: hand them back serving the tiny model, as later files expect
    // (its LM head too, which a run's checkpoints replace).
    const restore = async () => {
      try {
        syncEngineWeights(urls, tinyModelWithHeadDir(), 0);
      } catch (err) {
        console.error(`could not restore the shared engines' weights: ${err}`);
      }
    };
    return { urls, owned: false, stop: restore };
  }
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-engines-'));
  const env = { ...process.env };
  delete env.TEMPO_RL__ENGINES__URLS;
  const base = await freeRun(count);
  const cfg = loadConfig({
    env,
    sets: [
      `state_dir=${stateDir}`,
      `engines.count=${count}`,
      `engines.base_port=${base}`,
      'engines.urls=[]',
      ...(opts.sets ?? []),
    ],
  });
  const stop = async () => {
    await stopEngines(cfg);
    removeTestState(stateDir);
    releasePorts(base, count);
  };
  try {
    const { statuses } = await startEngines(cfg);
    return {
      urls: statuses.map((s) => s.url),
      owned: true,
      stop,
      pids: () => readEngineRecords(cfg).map((r) => r.pid),
      restart: async () => void (await startEngines(cfg)),
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The trainer's own weight sync (workers/trainer/weights/sync.py, as the sync_weights activity runs
 *  it) of `weightsDir` onto the engines, labelled `version`: pause (wait), reload, reset the caches,
 *  label, resume. Throws unless every engine took it. */
export function syncEngineWeights(urls: string[], weightsDir: string, version: number): void {
  const input = {
    run_id: 'test-engines',
    weight_version: version,
    checkpoint: weightsDir,
    engines: urls,
    pause_mode: 'wait',
  };
  const script = [
    'import sys',
    'from trainer.contract import SyncWeightsInput',
    'from trainer.weights.sync import sync_weights_from_disk',
    'out = sync_weights_from_disk(SyncWeightsInput.model_validate_json(sys.stdin.read()))',
    'print(out.model_dump_json())',
  ].join('\n');
  const env = { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers') };
  const res = spawnSync(pythonBin(), ['-c', script], {
    cwd: REPO_ROOT,
    env,
    input: JSON.stringify(input),
    encoding: 'utf8',
  });
  if (res.status !== 0) throw new Error(`weight sync failed: ${res.stderr.trim().split('\n').slice(-3).join(' ')}`);
  const out = JSON.parse(res.stdout) as { engines: Array<{ url: string; ok: boolean; error: string | null }> };
  const failed = out.engines.filter((e) => !e.ok);
  if (failed.length > 0)
    throw new Error(`weight sync failed on ${failed.map((e) => `${e.url} (${e.error})`).join(', ')}`);
}

/** Whether the engine's scheduling is paused (vLLM's dev-mode /is_paused; the trainer's weight sync pauses and resumes it). */
export async function enginePaused(url: string): Promise<boolean> {
  const res = await fetch(`${url}/is_paused`);
  if (!res.ok) throw new Error(`${url}/is_paused: HTTP ${res.status}`);
  return z.looseObject({ is_paused: z.boolean() }).parse(await res.json()).is_paused;
}

/** The weight version the engine serves (vLLM's /weight_info: the label of the last weight sync). */
export async function engineWeightVersion(url: string): Promise<string | null> {
  const res = await fetch(`${url}/weight_info`);
  if (!res.ok) throw new Error(`${url}/weight_info: HTTP ${res.status}`);
  return z.looseObject({ weight_version: z.string().nullish() }).parse(await res.json()).weight_version ?? null;
}

/** The tiny model with another seed (changed weights for reload tests); generated once, cached. */
export function changedWeightsDir(): string {
  const dir = path.join(cacheDir(), 'models', `${path.basename(tinyModelDir())}-seed1`);
  if (existsSync(path.join(dir, '.complete'))) return dir;
  const env = { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers') };
  const res = spawnSync(pythonBin(), ['-m', 'trainer.generators.tiny_model', '--out', dir, '--seed', '1'], {
    cwd: REPO_ROOT,
    env,
    stdio: 'inherit',
  });
  if (res.status !== 0) throw new Error('could not generate the seed-1 tiny model');
  return dir;
}

const WITH_HEAD = `
import os, shutil, sys
from pathlib import Path
from trainer.checkpoint.atomic import write_tied_lm_head
from trainer.model.policy import load_policy
src, out = Path(sys.argv[1]), Path(sys.argv[2])
tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
tmp.mkdir(parents=True)
for f in src.iterdir():
    if f.is_file():
        (tmp / f.name).symlink_to(f)
write_tied_lm_head(load_policy(str(src)), tmp)
try:
    os.replace(tmp, out)
except OSError:  # another process made it first
    shutil.rmtree(tmp)
    if not (out / ".complete").exists():
        raise
`;

/** The tiny model with its tied LM head as a file of its own (lm_head.safetensors, as the trainer's
 *  checkpoints carry it): vLLM's in-place reload re-packs the head only when it is named, so a reload
 *  of the tiny model's own directory leaves the head a training run synced (the shared engines then
 *  sample from a trained head). Made once beside it (links to its files), cached. */
export function tinyModelWithHeadDir(): string {
  const dir = path.join(cacheDir(), 'models', `${path.basename(tinyModelDir())}-head`);
  if (existsSync(path.join(dir, '.complete'))) return dir;
  const env = { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers') };
  const res = spawnSync(pythonBin(), ['-c', WITH_HEAD, tinyModelDir(), dir], { cwd: REPO_ROOT, env, stdio: 'inherit' });
  if (res.status !== 0) throw new Error('could not write the tiny model with its LM head');
  return dir;
}

export const IMAGE_PAD_ID = 151655;
export const IM_END_ID = 151645;

/** A PNG data URL; 128×64 is 4×2 merged 32-pixel patches: 8 image tokens for the tiny model. */
export async function pngDataUrl(width = 128, height = 64): Promise<string> {
  const png = await sharp({ create: { width, height, channels: 3, background: { r: 200, g: 40, b: 40 } } })
    .png()
    .toBuffer();
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
