// tempo-rl score --label L [--match exact|rounded] [--tolerance T] [--json]: the response on stdin →
// the default math reward (docs/reward.md). A label that cannot be graded against exits 2.
import { type Command, InvalidArgumentError, Option } from 'commander';
import { LabelError, REWARD_MATCHES, scoreResponse, type RewardMatch } from '../lib/math/reward.js';
import { action, printJson, readStdin } from './common.js';

/** --tolerance: an absolute tolerance ≥ 0 (shared with `env geo3k-step`). */
export function parseTolerance(v: string): number {
  const t = /^\s*[0-9.eE+-]+\s*$/.test(v) ? Number(v) : Number.NaN;
  if (!Number.isFinite(t) || t < 0)
    throw new InvalidArgumentError(`--tolerance must be a number ≥ 0, got ${JSON.stringify(v)}`);
  return t;
}

/** The grader flags, the same on every command that grades. */
export function gradeFlags(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        '--match <how>',
        'exact: equal values only (default, as vime); rounded: also a decimal rounding the other side',
      )
        .choices(REWARD_MATCHES)
        .default('exact'),
    )
    .option('--tolerance <t>', 'also accept |answer − label| ≤ t (absolute)', parseTolerance, 0);
}

/** Label errors are usage errors here: exit 2, naming --label. */
export function asUsageError(err: unknown): unknown {
  if (err instanceof LabelError) return Object.assign(new Error(`--label: ${err.message}`), { exitCode: 2 });
  return err;
}

export function register(program: Command): void {
  const cmd = program
    .command('score')
    .description('score a response (stdin) against a label with the default math reward: its last \\boxed{}')
    .requiredOption('--label <label>', 'the reference answer, e.g. 5*sqrt(3)');
  gradeFlags(cmd)
    .option('--json', 'print {"reward","extracted","label","reason"} as one JSON object')
    .action(
      action(async (opts: { label: string; tolerance: number; match: RewardMatch; json?: boolean }) => {
        const response = await readStdin();
        let s;
        try {
          s = scoreResponse(response, opts.label, { tolerance: opts.tolerance, match: opts.match });
        } catch (err) {
          throw asUsageError(err);
        }
        if (opts.json) printJson({ reward: s.reward, extracted: s.extracted, label: opts.label, reason: s.reason });
        else process.stdout.write(`${s.reward}\t${s.reason}\n`);
      }),
    );
}
