// The demo's GRPO config names its warm start (model.warm_start), so `tempo-rl train
// configs/cpu-tiny.yaml` trains the demo's policy, not the random tiny model. Cheap: the warm start is
// a cached directory here, so nothing is started or trained.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { Client } from '@temporalio/client';
import { loadConfig } from '../../config/load.js';
import { REPO_ROOT } from '../../base/paths.js';
import {
  WARM_START_SOURCES,
  warmStartConfig,
  warmStartDir,
  warmStartKey,
  withWarmStart,
} from '../../client/warm-start.js';

const DEMO_CONFIG = path.join(REPO_ROOT, 'configs', 'cpu-tiny.yaml');
const noClient = null as unknown as Client;
const noBuild = () => Promise.reject(new Error('the cached warm start must be used, not built'));

test('configs/cpu-tiny.yaml resolves to the cached warm start of the demo', async () => {
  const cache = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-warm-'));
  const saved = process.env.TEMPO_RL_CACHE;
  process.env.TEMPO_RL_CACHE = cache;
  try {
    const cfg = loadConfig({ file: DEMO_CONFIG, env: {}, sets: [`state_dir=${path.join(cache, 'state')}`] });
    assert.equal(cfg.model.warm_start, 'tool_transcripts');
    assert.equal(cfg.model.path, '');
    const dir = warmStartDir(warmStartKey(cfg));
    assert.ok(dir.startsWith(cache), dir);
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, '.complete'), 'ok\n');
    const { cfg: run, warm } = await withWarmStart(noClient, cfg, noBuild);
    assert.equal(run.model.path, dir);
    assert.equal(run.model.warm_start, 'none');
    assert.equal(warm?.built, false);
    // Everything else is the config as written.
    assert.deepEqual({ ...run, model: cfg.model }, cfg);
  } finally {
    if (saved === undefined) delete process.env.TEMPO_RL_CACHE;
    else process.env.TEMPO_RL_CACHE = saved;
  }
});

test('the warm start is built with the SFT config, itself without a warm start, and keyed by files that exist', () => {
  for (const f of WARM_START_SOURCES)
    assert.ok(existsSync(path.join(REPO_ROOT, f)), `${f} (a source of the warm start's key) exists`);
  const cfg = loadConfig({ file: DEMO_CONFIG, env: {} });
  const sft = warmStartConfig(cfg, '/tmp/transcripts.jsonl');
  assert.equal(sft.algorithm, 'sft');
  assert.equal(sft.model.warm_start, 'none');
  assert.equal(sft.model.path, '');
});

test('without model.warm_start a config trains model.path as it is; with a model.path or another environment it is refused', async () => {
  const plain = loadConfig({ file: DEMO_CONFIG, env: {}, sets: ['model.warm_start=none'] });
  assert.equal((await withWarmStart(noClient, plain, noBuild)).cfg, plain);
  assert.throws(
    () => loadConfig({ file: DEMO_CONFIG, env: {}, sets: ['model.path=/models/mine'] }),
    /model\.warm_start[\s\S]*model\.path must be empty/,
  );
  assert.throws(
    () =>
      loadConfig({
        file: DEMO_CONFIG,
        env: {},
        sets: ['rollout.environment=arithmetic', 'dataset.synthetic_task=arithmetic'],
      }),
    /model\.warm_start[\s\S]*needs rollout\.environment geo3k/,
  );
});
