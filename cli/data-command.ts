// tempo-rl data download geo3k | synth | sft-export — datasets on disk.
import path from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import { LocalBlobStore } from '../lib/blobstore.js';
import { GEO3K_REPO, downloadHfParquet } from '../lib/data/hf.js';
import { loadDataset } from '../lib/data/load.js';
import { writeSftJsonl } from '../lib/data/sft.js';
import { writeSyntheticDataset } from '../lib/data/synth.js';
import { stateLayout } from '../lib/paths.js';
import { action, configFrom, printJson } from './common.js';

function nonNegativeInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('expected an integer ≥ 0');
  return n;
}

const DATASETS: Record<string, string> = { geo3k: GEO3K_REPO };

export function register(program: Command): void {
  const data = program.command('data').description('datasets: download, synthesise, export');

  data
    .command('download')
    .argument('<name>', `dataset (${Object.keys(DATASETS).join(', ')})`)
    .option('--out <dir>', 'target folder', 'data/geo3k-hf')
    .option('--revision <rev>', 'Hub revision', 'main')
    .option('--json', 'print the written files as JSON')
    .description('download a dataset\'s Parquet files from the Hugging Face Hub (needs internet; HF_ENDPOINT, HF_TOKEN)')
    .action(
      action(async (name: string, opts: { out: string; revision: string; json?: boolean }) => {
        const repo = DATASETS[name];
        if (!repo) throw Object.assign(new Error(`unknown dataset ${name}; known: ${Object.keys(DATASETS).join(', ')}`), { exitCode: 2 });
        const files = await downloadHfParquet(repo, path.resolve(opts.out), { revision: opts.revision });
        if (opts.json) printJson({ repo, files });
        else process.stdout.write(`${files.join('\n')}\nuse: --set dataset.kind=parquet --set dataset.path=${path.resolve(opts.out)}\n`);
      }),
    );

  data
    .command('synth')
    .requiredOption('--out <dir>', 'target folder (geo3k_dir layout: train.jsonl, test.jsonl, images/)')
    .option('--n <n>', 'train rows', nonNegativeInt, 64)
    .option('--seed <s>', 'seed', nonNegativeInt, 0)
    .option('--json', 'print counts as JSON')
    .description('write a synthetic geometry dataset with known answers')
    .action(
      action(async (opts: { out: string; n: number; seed: number; json?: boolean }) => {
        const out = path.resolve(opts.out);
        const counts = await writeSyntheticDataset(out, opts.n, opts.seed);
        if (opts.json) printJson({ out, ...counts });
        else process.stdout.write(`wrote ${counts.train} train and ${counts.test} test rows to ${out}\n`);
      }),
    );

  data
    .command('sft-export')
    .requiredOption('--out <file>', 'JSONL file to write')
    .option('--split <split>', 'train or eval', 'train')
    .option('--json', 'print counts as JSON')
    .description('export the configured dataset as SFT messages ending in "Answer: \\boxed{…}"')
    .action(
      action(async (opts: { out: string; split: string; json?: boolean }, cmd: Command) => {
        if (opts.split !== 'train' && opts.split !== 'eval') throw Object.assign(new Error('--split must be train or eval'), { exitCode: 2 });
        const cfg = configFrom(cmd);
        const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
        const { rows, skipped } = await loadDataset(cfg.dataset, opts.split, store);
        const written = await writeSftJsonl(rows, store, opts.out, cfg.dataset.system_prompt);
        if (opts.json) printJson({ out: path.resolve(opts.out), rows: written, skipped });
        else process.stdout.write(`wrote ${written} rows to ${opts.out} (${skipped.length} skipped)\n`);
      }),
    );
}
