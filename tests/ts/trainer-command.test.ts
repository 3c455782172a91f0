import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../config/load.js';
import { trainerCommand, trainerTemporalEnv } from '../../supervise/trainer-process.js';

const config = (...sets: string[]) =>
  loadConfig({ env: {}, sets: ['state_dir=/tmp/tempo-rl-trainer-command', ...sets] });

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
  assert.throws(
    () => config('model.num_gpus=2'),
    (err: unknown) =>
      err instanceof ConfigError && /run\.trainer_standbys/.test(err.message) && /model\.num_gpus/.test(err.message),
  );
  assert.throws(() => config('model.num_gpus=2', 'run.trainer_standbys=2'), ConfigError);
});

test('the trainer gets the resolved connection as TEMPORAL_* variables and reads no profile file of its own', () => {
  const cfg = config(
    'temporal.address=t.example:7233',
    'temporal.namespace=train',
    'temporal.api_key=k',
    'temporal.tls.enabled=true',
    'temporal.tls.server_ca_cert_data=CA PEM',
    'temporal.tls.server_name=t.example',
  );
  const env = trainerTemporalEnv(cfg, {
    PATH: '/bin',
    TEMPORAL_PROFILE: 'stale',
    TEMPORAL_TLS_CLIENT_CERT_PATH: '/stale.pem',
  });
  assert.deepEqual(env, {
    PATH: '/bin',
    TEMPORAL_ADDRESS: 't.example:7233',
    TEMPORAL_NAMESPACE: 'train',
    TEMPORAL_API_KEY: 'k',
    TEMPORAL_TLS: 'true',
    TEMPORAL_TLS_SERVER_CA_CERT_DATA: 'CA PEM',
    TEMPORAL_TLS_SERVER_NAME: 't.example',
  });
  assert.ok(trainerCommand(cfg).args.includes('--no-config-file'));
});
