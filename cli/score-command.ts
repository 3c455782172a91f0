// tempo-rl score --label L [--tolerance T] [--json]: the response on stdin → the default math reward.
import { type Command, InvalidArgumentError } from 'commander';
import { scoreResponse } from '../lib/math/reward.js';
import { action, printJson, readStdin } from './common.js';

function parseTolerance(v: string): number {
  const t = Number(v);
  if (!Number.isFinite(t) || t < 0) throw new InvalidArgumentError('tolerance must be a number ≥ 0');
  return t;
}

export function register(program: Command): void {
  program
    .command('score')
    .description('score a response (stdin) against a label with the default math reward: its last \\boxed{}')
    .requiredOption('--label <label>', 'the reference answer, e.g. 5*sqrt(3)')
    .option('--tolerance <t>', 'accept |answer − label| ≤ t·max(1, |label|)', parseTolerance)
    .option('--json', 'print {"reward","extracted","label","reason"} as one JSON object')
    .action(
      action(async (opts: { label: string; tolerance?: number; json?: boolean }) => {
        const response = await readStdin();
        const s = scoreResponse(response, opts.label, { tolerance: opts.tolerance });
        if (opts.json) printJson({ reward: s.reward, extracted: s.extracted, label: opts.label, reason: s.reason });
        else process.stdout.write(`${s.reward}\t${s.reason}\n`);
      }),
    );
}
