// tempo-rl env geo3k-step --label L --turn K --max-turns N [--match M] [--tolerance T] [--json]: one
// environment step on the assistant turn read from stdin. Bad flags exit 2 naming the flag and value.
import type { Command } from 'commander';
import { EnvInputError, geo3kStep } from '../lib/env/index.js';
import { checkLabel, type RewardMatch } from '../lib/math/reward.js';
import { action, printJson, readStdin } from './common.js';
import { asUsageError, gradeFlags } from './score-command.js';

const usageError = (message: string) => Object.assign(new Error(message), { exitCode: 2 });

function positiveInt(flag: string, v: string): number {
  // digits only: "1.5", "1e0", "0x2", " 3" and "" are not turn numbers
  if (!/^[1-9][0-9]{0,8}$/.test(v)) throw usageError(`${flag} must be a positive integer, got ${JSON.stringify(v)}`);
  return Number(v);
}

export function register(program: Command): void {
  const env = program.command('env').description('run environment steps by hand');
  const step = env
    .command('geo3k-step')
    .description('one Geo3K step on the turn text from stdin → {done, score, final_answer, observation}')
    .requiredOption('--label <answer>', 'the correct answer')
    .requiredOption('--turn <k>', 'this turn, 1-based, at most --max-turns')
    .requiredOption('--max-turns <n>', 'turns allowed in the episode');
  gradeFlags(step)
    .option('--json', 'one JSON object on stdout')
    .action(
      action(
        async (opts: {
          label: string;
          turn: string;
          maxTurns: string;
          tolerance: number;
          match: RewardMatch;
          json?: boolean;
        }) => {
          const turn = positiveInt('--turn', opts.turn);
          const max_turns = positiveInt('--max-turns', opts.maxTurns);
          if (turn > max_turns) throw usageError(`--turn ${turn} is greater than --max-turns ${max_turns}`);
          try {
            checkLabel(opts.label);
          } catch (err) {
            throw asUsageError(err);
          }
          const text = await readStdin();
          let r;
          try {
            r = geo3kStep({ text, label: opts.label, turn, max_turns, tolerance: opts.tolerance, match: opts.match });
          } catch (err) {
            throw err instanceof EnvInputError ? usageError(err.message) : err;
          }
          const out = { done: r.done, score: r.score, final_answer: r.final_answer, observation: r.observation };
          if (opts.json) return printJson({ ...out, reason: r.reason, tool_call: r.tool_call });
          console.log(
            r.done
              ? `done (${r.reason}): score ${r.score}, final answer ${JSON.stringify(r.final_answer)}`
              : `continue (${r.reason}): score ${r.score}\nobservation: ${r.observation}`,
          );
        },
      ),
    );
}
