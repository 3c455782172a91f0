import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../config/load.js';
import { trainerCommand } from '../../workers/trainer-process.js';

const config = (...sets: string[]) => loadConfig({ env: {}, sets: ['state_dir=/tmp/tempo-rl-trainer-command', ...sets] });

test('one device: the trainer worker itself', () => {
  for (const n of [0, 1]) {
    const { args } = trainerCommand(config(`model.num_gpus=${n}`));
    assert.deepEqual(args.slice(0, 2), ['-m', 'trainer.worker']);
  }
});

test('model.num_gpus N > 1: torchrun starts N ranks of the trainer worker', () => {
  const { args } = trainerCommand(config('model.num_gpus=4', 'run.trainer_standbys=0'));
  assert.deepEqual(args.slice(0, 5), ['-m', 'torch.distributed.run', '--standalone', '--nproc-per-node', '4']);
  const worker = args.indexOf('trainer.worker');
  assert.ok(worker > 5 && args[worker - 1] === '-m', args.join(' '));
  assert.ok(args.includes('--task-queue') && args.includes('--lock-file'), 'the worker keeps its flags');
});

test('model.num_gpus > 1 with standby trainers is refused, naming both keys', () => {
  assert.throws(() => config('model.num_gpus=2'), (err: unknown) =>
    err instanceof ConfigError && /run\.trainer_standbys/.test(err.message) && /model\.num_gpus/.test(err.message));
  assert.throws(() => config('model.num_gpus=2', 'run.trainer_standbys=2'), ConfigError);
});
