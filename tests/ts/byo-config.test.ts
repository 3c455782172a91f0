// The config of a Python environment (python_env, rollout.environment verifiers or openenv): what is refused,
// naming the key; what the plan and the stack take from it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { initialRunState, pythonEnvSettings } from '../../config/run-plan.js';
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

test('python_env.openenv: refused where it would be ignored or cannot run, naming the key', () => {
  const openenv = (...sets: string[]) => ['rollout.environment=openenv', ...sets];
  const cases: Array<[string[], RegExp]> = [
    [
      openenv(),
      /python_env\.openenv\.url: or python_env\.openenv\.app is required when rollout\.environment is openenv/,
    ],
    [
      openenv('python_env.openenv.url=http://127.0.0.1:8000', 'python_env.openenv.app=m:app'),
      /python_env\.openenv\.app: and python_env\.openenv\.url are both set/,
    ],
    [
      openenv('python_env.openenv.url=localhost:8000'),
      /python_env\.openenv\.url: is not an http\(s\):\/\/ or ws\(s\):\/\/ address/,
    ],
    [openenv('python_env.openenv.app=tempo_rl_guess'), /python_env\.openenv\.app: is not module:attr/],
    [
      openenv('python_env.openenv.app=m:app', 'python_env.openenv.action=text'),
      /python_env\.openenv\.text_field: is required when python_env\.openenv\.action is text/,
    ],
    [
      openenv('python_env.openenv.app=m:app', 'python_env.openenv.text_field=guess'),
      /python_env\.openenv\.text_field: is read only with python_env\.openenv\.action text/,
    ],
    [
      openenv('python_env.openenv.app=m:app', 'python_env.harness=opencode'),
      /python_env\.harness: is a verifiers harness/,
    ],
    [openenv('python_env.openenv.app=m:app', 'python_env.args.seed=3'), /python_env\.args\.seed: is set by tempo-rl/],
    [openenv('python_env.openenv.app=m:app', 'python_env.id=x'), /python_env\.id: names a Python environment/],
    [
      openenv('python_env.openenv.app=m:app', 'rollout.multi_turn=false'),
      /rollout\.multi_turn: must be true for the openenv environment/,
    ],
    [
      ['python_env.openenv.app=m:app'],
      /python_env\.openenv\.app: configures an OpenEnv server, which runs only with rollout\.environment openenv/,
    ],
    [
      ['rollout.environment=verifiers', 'python_env.id=x', 'python_env.openenv.reward=last'],
      /python_env\.openenv\.reward: configures an OpenEnv server/,
    ],
    [
      openenv('python_env.openenv.app=m:app', 'python_env.openenv.step_timeout_s=0'),
      /python_env\.openenv\.step_timeout_s/,
    ],
  ];
  for (const [sets, re] of cases)
    assert.throws(
      () => load(...sets),
      (err: Error) => re.test(err.message),
      sets.join(' '),
    );
});

test('python_env.openenv reaches the episodes and the stack: the server, text mode without a stop string', () => {
  const cfg = load(
    'rollout.environment=openenv',
    'python_env.openenv.app=tempo_rl_guess:app',
    'python_env.openenv.action=text',
    'python_env.openenv.text_field=guess',
    'python_env.args.max_guesses=5',
  );
  assert.equal(needsEnvironmentWorker(cfg), true);
  const p = pythonEnvSettings(cfg)!;
  assert.equal(p.kind, 'openenv');
  assert.deepEqual(p.args, { max_guesses: 5 });
  assert.deepEqual(p.openenv, {
    url: '',
    app: 'tempo_rl_guess:app',
    action: 'text',
    text_field: 'guess',
    observation_field: '',
    reward: 'sum',
    step_timeout_s: 60,
  });
  const plan = initialRunState(cfg, 'run-x').plan;
  assert.deepEqual([plan.episode.stop, plan.eval_episode.stop], [[], []]);
  const tool = initialRunState(
    load('rollout.environment=openenv', 'python_env.openenv.url=http://127.0.0.1:8000'),
    'r',
  ).plan;
  assert.deepEqual(tool.episode.stop, ['</tool_call>']);
  assert.equal(tool.episode.environment, 'openenv');
});
