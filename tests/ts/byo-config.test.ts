// The config of a Python environment (python_env, rollout.environment verifiers): what is refused,
// naming the key; what the plan and the stack take from it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { pythonEnvSettings } from '../../lib/run-plan.js';
import { needsEnvironmentWorker, environmentWorkerCommand } from '../../supervise/environment-worker.js';

const load = (...sets: string[]) => loadConfig({ env: {}, sets: ['state_dir=/tmp/tempo-rl-byo-config', ...sets] });

test('python_env: refused where it would be ignored or cannot run, naming the key', () => {
  const cases: Array<[string[], RegExp]> = [
    [['python_env.id=x'], /python_env\.id: names a Python environment.*rollout\.environment verifiers.*"x"/],
    [['rollout.environment=verifiers'], /python_env\.id: is required when rollout\.environment is verifiers/],
    [
      ['rollout.environment=verifiers', 'python_env.id=x', 'rollout.multi_turn=false'],
      /rollout\.multi_turn: must be true/,
    ],
    [['rollout.environment=verifiers', 'python_env.id=x', 'python_env.workers=0'], /python_env\.workers/],
    [
      ['rollout.environment=verifiers', 'python_env.id=x', 'python_env.episode_timeout_s=1'],
      /python_env\.episode_timeout_s: at least 5 s/,
    ],
    [
      ['rollout.environment=verifiers', 'python_env.id=x', 'dataset.synthetic_task=measure'],
      /dataset\.synthetic_task.*taskset/,
    ],
  ];
  for (const [sets, re] of cases)
    assert.throws(
      () => load(...sets),
      (err: Error) => re.test(err.message),
      sets.join(' '),
    );
});

test('python_env reaches the episodes and the stack: the queue of its own, the worker only when needed', () => {
  const cfg = load('rollout.environment=verifiers', 'python_env.id=tempo_rl_geo3k', 'python_env.workers=3');
  assert.match(cfg.temporal.task_queues.environments, /^environments-[0-9a-f]{8}$/);
  assert.equal(cfg.dataset.synthetic_task ?? 'taskset', 'taskset');
  const p = pythonEnvSettings(cfg)!;
  assert.deepEqual([p.id, p.task_queue, p.harness], ['tempo_rl_geo3k', cfg.temporal.task_queues.environments, 'null']);
  assert.equal(needsEnvironmentWorker(cfg), true);
  assert.equal(needsEnvironmentWorker(load()), false);
  assert.equal(pythonEnvSettings(load()), undefined);
  const { args } = environmentWorkerCommand(cfg);
  assert.deepEqual(args.slice(args.indexOf('--task-queue'), args.indexOf('--task-queue') + 2), [
    '--task-queue',
    cfg.temporal.task_queues.environments,
  ]);
});
