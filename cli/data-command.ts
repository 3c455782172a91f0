// tempo-rl data download geo3k | synth | sft-export — datasets on disk.
import path from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import { LocalBlobStore } from '../stores/blobstore.js';
import { GEO3K_REPO, downloadHfParquet } from '../lib/data/hf.js';
import { loadDataset } from '../lib/data/load.js';
import { SFT_OUTPUT, writeSftJsonl, writeSftRecords } from '../lib/data/sft.js';
import { MAX_PER_ROW, toolTranscripts, transcriptCountProblem } from '../lib/data/transcripts.js';
import { writeSyntheticDataset } from '../lib/data/synth.js';
import { MAX_SYNTHETIC_ROWS } from '../config/schema.js';
import { checkOutputFile, checkOutputLocation } from '../base/out-path.js';
import { stateLayout } from '../stores/layout.js';
import { action, configFrom, printJson } from './common.js';

/** A commander parser for integers in [min, max], written as integers (digits only: not `1e3`, not
 *  empty, which Number() would read as 1000 and 0). */
function integerIn(min: number, max = Number.MAX_SAFE_INTEGER, why = ''): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!/^[0-9]+$/.test(v) || !Number.isSafeInteger(n) || n < min)
      throw new InvalidArgumentError(`expected an integer ≥ ${min} (digits only), given ${JSON.stringify(v)}`);
    if (n > max) throw new InvalidArgumentError(`at most ${max}${why}, given ${JSON.stringify(v)}`);
    return n;
  };
}

/** The configured dataset's split for an export command, after checking --split and --out. */
async function splitForExport(opts: { out: string; split: string; force?: boolean }, cmd: Command) {
  if (opts.split !== 'train' && opts.split !== 'eval')
    throw Object.assign(new Error(`--split ${JSON.stringify(opts.split)}: expected train or eval`), { exitCode: 2 });
  const out = checkOutputFile(opts.out, { force: opts.force, own: SFT_OUTPUT });
  const cfg = configFrom(cmd);
  // The exported JSONL names image files, so its images are staged in the local store under the
  // state dir whatever blobs.uri says; a run reading it (sft.path) ingests them into its own store.
  const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
  return { cfg, store, out, ...(await loadDataset(cfg.dataset, opts.split, store, cfg.rollout.environment)) };
}

/** A commander parser for a probability, written as a decimal number (not empty: Number('') is 0). */
function probability(v: string): number {
  const p = Number(v);
  if (!/^(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$/.test(v) || !(p >= 0 && p <= 1))
    throw new InvalidArgumentError(`expected a number in [0, 1], given ${JSON.stringify(v)}`);
  return p;
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
    .description("download a dataset's Parquet files from the Hugging Face Hub (needs internet; HF_ENDPOINT, HF_TOKEN)")
    .action(
      action(async (name: string, opts: { out: string; revision: string; json?: boolean }) => {
        const repo = DATASETS[name];
        if (!repo)
          throw Object.assign(new Error(`unknown dataset ${name}; known: ${Object.keys(DATASETS).join(', ')}`), {
            exitCode: 2,
          });
        const files = await downloadHfParquet(repo, checkOutputLocation(opts.out), { revision: opts.revision });
        if (opts.json) printJson({ repo, files });
        else
          process.stdout.write(
            `${files.join('\n')}\nuse: --set dataset.kind=parquet --set dataset.path=${path.resolve(opts.out)}\n`,
          );
      }),
    );

  data
    .command('synth')
    .requiredOption('--out <dir>', 'target folder (geo3k_dir layout: train.jsonl, test.jsonl, images/)')
    .option(
      '--n <n>',
      'train rows',
      integerIn(0, MAX_SYNTHETIC_ROWS, ' rows (each is drawn and rendered to an image)'),
      64,
    )
    .option('--seed <s>', 'seed', integerIn(0), 0)
    .option('--force', 'replace a synthetic dataset written there before (never other files)')
    .option('--json', 'print counts as JSON')
    .description('write a synthetic geometry dataset with known answers into a new or empty folder')
    .action(
      action(async (opts: { out: string; n: number; seed: number; force?: boolean; json?: boolean }) => {
        const out = checkOutputLocation(opts.out);
        const counts = await writeSyntheticDataset(out, opts.n, opts.seed, { force: opts.force });
        if (opts.json) printJson({ out, ...counts });
        else process.stdout.write(`wrote ${counts.train} train and ${counts.test} test rows to ${out}\n`);
      }),
    );

  data
    .command('sft-export')
    .requiredOption('--out <file>', 'JSONL file to write')
    .option('--split <split>', 'train or eval', 'train')
    .option('--force', 'overwrite an existing --out file')
    .option('--json', 'print counts as JSON')
    .description('export the configured dataset as SFT messages ending in "Answer: \\boxed{…}"')
    .action(
      action(async (opts: { out: string; split: string; force?: boolean; json?: boolean }, cmd: Command) => {
        const { cfg, store, out, rows, skipped } = await splitForExport(opts, cmd);
        const written = await writeSftJsonl(rows, store, out, cfg.dataset.system_prompt, cfg.rollout.environment);
        if (opts.json) printJson({ out, rows: written, skipped });
        else process.stdout.write(`wrote ${written} rows to ${out} (${skipped.length} skipped)\n`);
      }),
    );

  data
    .command('sft-transcripts')
    .requiredOption('--out <file>', 'JSONL file to write')
    .option('--split <split>', 'train or eval', 'train')
    .option(
      '--first-correct <p>',
      "probability that a transcript's first answer is right (default: a uniform guess among the answers)",
      probability,
    )
    .option(
      '--per-row <n>',
      `transcripts per row, each with its own answers (default 1, at most ${MAX_PER_ROW})`,
      integerIn(1, MAX_PER_ROW, ' copies of a row'),
    )
    .option(
      '--recheck <p>',
      'the chance that a turn after a wrong answer answers right (default: a draw among the answers not tried)',
      probability,
    )
    .option('--force', 'overwrite an existing --out file')
    .option('--json', 'print counts as JSON')
    .description(
      'synthesise multi-turn calc_score transcripts (wrong-then-right) from the configured dataset, for algorithm: sft',
    )
    .action(
      action(
        async (
          opts: {
            out: string;
            split: string;
            firstCorrect?: number;
            perRow?: number;
            recheck?: number;
            force?: boolean;
            json?: boolean;
          },
          cmd: Command,
        ) => {
          const { cfg, store, out, rows, skipped } = await splitForExport(opts, cmd);
          if (cfg.rollout.environment !== 'geo3k')
            throw Object.assign(
              new Error(
                `sft-transcripts writes calc_score transcripts (Geo3K's tool); rollout.environment is ${cfg.rollout.environment}`,
              ),
              { exitCode: 2 },
            );
          // Known only once the rows are loaded: the total the copies make.
          const tooMany = transcriptCountProblem(rows.length, opts.perRow ?? 1);
          if (tooMany) throw Object.assign(new Error(`--per-row ${opts.perRow ?? 1}: ${tooMany}`), { exitCode: 2 });
          const records = toolTranscripts(rows, store, {
            max_turns: cfg.rollout.max_turns,
            seed: cfg.rollout.seed,
            first_correct: opts.firstCorrect,
            per_row: opts.perRow,
            systemPrompt: cfg.dataset.system_prompt,
            match: cfg.rollout.reward_match,
            tolerance: cfg.rollout.reward_tolerance,
            recheck: opts.recheck,
          });
          const written = await writeSftRecords(records, out);
          if (opts.json) printJson({ out, records: written, skipped });
          else
            process.stdout.write(
              `wrote ${written} transcripts to ${out} (${skipped.length} rows skipped); train on them with --set algorithm=sft --set sft.path=${out}\n`,
            );
        },
      ),
    );
}
