import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { ConfigError, loadConfig, redact } from '../../config/load.js';
import { rolloutWorkerProcesses } from '../../config/schema.js';
import { initialRunState } from '../../config/run-plan.js';
import { REPO_ROOT } from '../../base/paths.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-config-'));
function yamlFile(text: string): string {
  const f = path.join(tmp, `c${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(f, text);
  return f;
}

test('defaults load and paths resolve', () => {
  const cfg = loadConfig({ env: { HOME: '/home/u' } });
  assert.equal(cfg.rollout.max_turns, 3);
  assert.equal(cfg.grpo.eps_clip_high, 0.28);
  assert.equal(cfg.state_dir, '/home/u/.local/state/tempo-rl');
});

test('precedence: defaults < file < environment < --set', () => {
  const f = yamlFile('rollout:\n  max_turns: 5\n  temperature: 0.7\ngrpo:\n  lr: 0.001\n');
  const env = { TEMPO_RL__ROLLOUT__MAX_TURNS: '6', TEMPO_RL__GRPO__LR: '0.002', TEMPO_RL_MODEL: '/m' };
  const cfg = loadConfig({ file: f, env, sets: ['grpo.lr=0.003'] });
  assert.equal(cfg.rollout.temperature, 0.7);
  assert.equal(cfg.rollout.max_turns, 6);
  assert.equal(cfg.grpo.lr, 0.003);
  assert.equal(cfg.model.path, '/m');
});

test('task queues are named after the resolved state dir unless given, and a reloaded config keeps them', () => {
  const a = loadConfig({ env: { TEMPO_RL_STATE_DIR: '/srv/a' } });
  const b = loadConfig({ env: { TEMPO_RL_STATE_DIR: '/srv/b' } });
  const aAgain = loadConfig({ env: { HOME: '/elsewhere' }, sets: ['state_dir=/srv/x/../a/'] });
  assert.match(a.temporal.task_queues.rollout, /^rollout-[0-9a-f]{8}$/);
  assert.match(a.temporal.task_queues.trainer, /^trainer-[0-9a-f]{8}$/);
  assert.equal(a.temporal.task_queues.rollout.slice(-8), a.temporal.task_queues.trainer.slice(-8));
  assert.notEqual(a.temporal.task_queues.rollout, b.temporal.task_queues.rollout);
  assert.notEqual(a.temporal.task_queues.trainer, b.temporal.task_queues.trainer);
  assert.deepEqual(aAgain.temporal.task_queues, a.temporal.task_queues);
  const given = loadConfig({
    env: { TEMPO_RL_STATE_DIR: '/srv/a', TEMPO_RL__TEMPORAL__TASK_QUEUES__TRAINER: 'gpu-trainers' },
  });
  assert.equal(given.temporal.task_queues.trainer, 'gpu-trainers');
  assert.equal(given.temporal.task_queues.rollout, a.temporal.task_queues.rollout);
  // Background workers get the resolved config as a file: the names must come back as they were.
  const file = path.join(tmp, 'resolved.json');
  writeFileSync(file, JSON.stringify(a));
  assert.deepEqual(loadConfig({ file, env: {} }).temporal.task_queues, a.temporal.task_queues);
  assert.throws(
    () => loadConfig({ env: {}, sets: ['temporal.task_queues.rollout=" rollout"'] }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(
        err.message,
        /temporal\.task_queues\.rollout: must not start or end with whitespace.*given the string " rollout"/,
      );
      return true;
    },
  );
});

test('standard TEMPORAL_* variables configure the connection', () => {
  const cfg = loadConfig({
    env: {
      TEMPORAL_ADDRESS: 'prod.tmprl.cloud:7233',
      TEMPORAL_NAMESPACE: 'ns',
      TEMPORAL_API_KEY: 'sekrit',
      TEMPORAL_TLS: 'true',
    },
  });
  assert.equal(cfg.temporal.address, 'prod.tmprl.cloud:7233');
  assert.equal(cfg.temporal.namespace, 'ns');
  assert.equal(cfg.temporal.tls.enabled, true);
  assert.equal((redact(cfg) as { temporal: { api_key: string } }).temporal.api_key, '***');
});

test('a misspelled key is an error naming the path and a suggestion', () => {
  const f = yamlFile('rollout:\n  max_trns: 5\n');
  assert.throws(
    () => loadConfig({ file: f, env: {} }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /rollout\.max_trns: unknown key — did you mean "max_turns"\?/);
      return true;
    },
  );
});

test('a wrong type names the path, the expectation and what was given', () => {
  const f = yamlFile('grpo:\n  eps_clip: "wide"\nengines:\n  routing: random\n');
  assert.throws(
    () => loadConfig({ file: f, env: {} }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /grpo\.eps_clip: .*expected number.*given the string "wide"/);
      assert.match(err.message, /engines\.routing: .*round_robin.*consistent_hash.*cache_aware/);
      return true;
    },
  );
});

test('engines.routing: cache_aware by default, each policy accepted; a negative balance threshold refused', () => {
  const cfg = loadConfig({ env: {} });
  assert.deepEqual([cfg.engines.routing, cfg.engines.balance_threshold], ['cache_aware', 4]);
  for (const p of ['round_robin', 'consistent_hash', 'cache_aware'])
    assert.equal(loadConfig({ env: {}, sets: [`engines.routing=${p}`] }).engines.routing, p);
  assert.throws(() => loadConfig({ env: {}, sets: ['engines.balance_threshold=-1'] }), /engines\.balance_threshold/);
});

test('rollout.worker_processes: auto is one process per 4 cores (1 to 8); a number is honoured, 0 refused', () => {
  const cfg = loadConfig({ env: {} });
  assert.equal(cfg.rollout.worker_processes, 'auto');
  assert.deepEqual(
    [1, 2, 7, 8, 16, 32, 64, 256].map((cores) => rolloutWorkerProcesses(cfg.rollout, cores)),
    [1, 1, 1, 2, 4, 8, 8, 8],
  );
  const three = loadConfig({ env: {}, sets: ['rollout.worker_processes=3'] });
  assert.equal(rolloutWorkerProcesses(three.rollout, 64), 3);
  assert.equal(loadConfig({ env: { TEMPO_RL__ROLLOUT__WORKER_PROCESSES: '2' } }).rollout.worker_processes, 2);
  for (const bad of ['0', '-1', '1.5', 'many', '65'])
    assert.throws(
      () => loadConfig({ env: {}, sets: [`rollout.worker_processes=${bad}`] }),
      /rollout\.worker_processes/,
      bad,
    );
});

test('tempo-rl config check exits 2 on a typo and prints the resolved config redacted', () => {
  const bin = path.join(REPO_ROOT, 'bin', 'tempo-rl');
  const bad = spawnSync(bin, ['config', 'check', yamlFile('rolout:\n  max_turns: 2\n')], { encoding: 'utf8' });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /rolout: unknown key — did you mean "rollout"\?/);
  const out = execFileSync(bin, ['config', 'check', '--json', yamlFile('rollout:\n  max_turns: 2\n')], {
    encoding: 'utf8',
    env: { ...process.env, TEMPORAL_API_KEY: 'abc' },
  });
  const parsed = JSON.parse(out);
  assert.equal(parsed.rollout.max_turns, 2);
  assert.equal(parsed.temporal.api_key, '***');
});

test('the async window is refused without TIS and with SFT, and its settings reach the episodes', () => {
  assert.throws(
    () => loadConfig({ env: {}, sets: ['rollout.max_staleness=1'] }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /grpo\.tis\.enabled: must be true when rollout\.max_staleness > 0/);
      return true;
    },
  );
  assert.throws(
    () =>
      loadConfig({
        env: {},
        sets: ['rollout.max_staleness=1', 'grpo.tis.enabled=true', 'algorithm=sft', 'sft.path=x.jsonl'],
      }),
    /rollout\.max_staleness: must be 0 with algorithm sft/,
  );
  assert.throws(() => loadConfig({ env: {}, sets: ['rollout.sync_in_flight=drop'] }), /rollout\.sync_in_flight/);
  const cfg = loadConfig({
    env: {},
    sets: ['rollout.max_staleness=2', 'grpo.tis.enabled=true', 'grpo.tis.mode=mask', 'rollout.sync_in_flight=abort'],
  });
  const plan = initialRunState(cfg, 'r').plan;
  assert.deepEqual([plan.episode.max_staleness, plan.episode.sync_in_flight], [2, 'abort']);
  assert.equal(plan.eval_episode.max_staleness, undefined, 'eval episodes run on exactly the weights evaluated');
  assert.equal(plan.hyper.tis.mode, 'mask');
  assert.equal(
    initialRunState(loadConfig({ env: {} }), 'r').plan.episode.max_staleness,
    undefined,
    'synchronous plans are unchanged',
  );
});

test('every shipped config in configs/ loads; the Qwen3.5-35B-A3B one trains on 8 GPUs with routing replay, one sample a micro-batch', () => {
  const dir = path.join(REPO_ROOT, 'configs');
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort();
  assert.ok(files.includes('geo3k-singleturn-qwen35-35b-a3b.yaml'), files.join(', '));
  for (const f of files) assert.doesNotThrow(() => loadConfig({ file: path.join(dir, f), env: {} }), f);
  const cfg = loadConfig({ file: path.join(dir, 'geo3k-singleturn-qwen35-35b-a3b.yaml'), env: {} });
  assert.deepEqual(
    [cfg.model.path, cfg.model.dtype, cfg.model.num_gpus, cfg.run.trainer_standbys],
    ['Qwen/Qwen3.5-35B-A3B', 'bfloat16', 8, 0],
  );
  assert.deepEqual(
    [cfg.rollout.prompts_per_step, cfg.rollout.n_samples_per_prompt, cfg.rollout.temperature, cfg.run.steps],
    [64, 8, 0.8, 3000],
  );
  const hyper = initialRunState(cfg, 'r').plan.hyper;
  assert.equal(hyper.routing_replay, true);
  assert.equal(hyper.micro_batch_tokens, 1, 'Qwen3.5 Gated DeltaNet layers must not see packed rows');
  assert.equal(hyper.compute_dtype, 'bfloat16');
});

test("the 2B GPU configs carry vime's values: bf16, its GPU counts, colocated where it is, a checkpoint every 20 steps", () => {
  const load = (f: string) => loadConfig({ file: path.join(REPO_ROOT, 'configs', f), env: {} });
  const multi = load('geo3k-multiturn-qwen3vl-2b.yaml');
  assert.deepEqual(
    [
      multi.model.dtype,
      multi.model.num_gpus,
      multi.engines.count,
      multi.engines.colocate,
      multi.run.checkpoint_interval,
    ],
    ['bfloat16', 4, 4, true, 20],
  );
  assert.deepEqual(initialRunState(multi, 'r').plan.weights, {
    transport: 'ipc',
    engine_dtype: 'bfloat16',
    ipc_bucket_mb: 1024,
    ipc_load: 'auto',
    colocated_sleep_level: 2,
  });
  const single = load('geo3k-singleturn-qwen3vl-2b.yaml');
  assert.deepEqual(
    [
      single.model.dtype,
      single.model.num_gpus,
      single.engines.count,
      single.engines.colocate,
      single.run.checkpoint_interval,
      single.rollout.temperature,
    ],
    ['bfloat16', 4, 4, false, 20, 0.8],
  );
  assert.deepEqual(
    initialRunState(single, 'r').plan.weights,
    { transport: 'disk', engine_dtype: 'bfloat16', ipc_bucket_mb: 1024, ipc_load: 'auto' },
    'disk, not colocated',
  );
});

test('where the engines are and how weights reach them is checked together, each refusal naming why', () => {
  const refused = (sets: string[], why: RegExp) =>
    assert.throws(() => loadConfig({ env: {}, sets: ['model.path=/m', ...sets] }), why, sets.join(' '));
  refused(
    ['engines.weight_transport=nccl', 'model.num_gpus=1'],
    /engines\.weight_transport[\s\S]*nccl[\s\S]*not built yet: it can only be tested with two GPUs/,
  );
  refused(['engines.colocate=true'], /engines\.colocate[\s\S]*needs GPUs/);
  refused(
    ['engines.colocate=true', 'model.num_gpus=1', 'rollout.max_staleness=1', 'grpo.tis.enabled=true'],
    /needs rollout\.max_staleness 0/,
  );
  refused(
    ['engines.colocate=true', 'model.num_gpus=1', 'engines.weight_transport=disk'],
    /must be ipc \(or auto\) with engines\.colocate/,
  );
  refused(['engines.weight_transport=ipc', 'model.num_gpus=1'], /ipc on GPUs needs the engines on the trainer's GPUs/);
  refused(['engines.weight_transport=ipc', 'engines.urls=["http://h:8000"]'], /ipc needs the engines tempo-rl starts/);
  refused(['engines.gpu_memory_utilization=0.5'], /engines\.gpu_memory_utilization[\s\S]*is for GPU engines/);
  refused(['engines.gpu_memory_utilization=1.5', 'model.num_gpus=1'], /engines\.gpu_memory_utilization/);
  const cpuIpc = loadConfig({ env: {}, sets: ['model.path=/m', 'engines.weight_transport=ipc'] });
  assert.equal(
    initialRunState(cpuIpc, 'r').plan.weights?.transport,
    'ipc',
    'on CPU, ipc goes through /dev/shm to engines on this host',
  );
  assert.equal(initialRunState(loadConfig({ env: {}, sets: ['model.path=/m'] }), 'r').plan.weights?.transport, 'disk');
});
