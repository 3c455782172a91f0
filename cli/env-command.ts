// tempo-rl env geo3k-step --label L --turn K --max-turns N [--json]: one environment step on the
// assistant turn read from stdin.
import type { Command } from 'commander';
import { getEnvironment } from '../lib/env/index.js';
import { action, printJson, readStdin } from './common.js';

function positiveInt(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw Object.assign(new Error(`--${name} must be a positive integer, got ${JSON.stringify(v)}`), { exitCode: 2 });
  return n;
}

export function register(program: Command): void {
  const env = program.command('env').description('run environment steps by hand');
  env
    .command('geo3k-step')
    .description('one Geo3K step on the turn text from stdin → {done, score, final_answer, observation}')
    .requiredOption('--label <answer>', 'the correct answer')
    .requiredOption('--turn <k>', 'this turn, 1-based')
    .requiredOption('--max-turns <n>', 'turns allowed in the episode')
    .option('--tolerance <t>', 'relative numeric tolerance of the grader', '0')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (opts: { label: string; turn: string; maxTurns: string; tolerance: string; json?: boolean }) => {
        const turn = positiveInt('turn', opts.turn);
        const max_turns = positiveInt('max-turns', opts.maxTurns);
        const tolerance = Number(opts.tolerance);
        if (!Number.isFinite(tolerance) || tolerance < 0) throw Object.assign(new Error('--tolerance must be a number ≥ 0'), { exitCode: 2 });
        const text = await readStdin();
        const r = getEnvironment('geo3k').step({ text, label: opts.label, turn, max_turns, tolerance });
        const out = { done: r.done, score: r.score, final_answer: r.final_answer, observation: r.observation };
        if (opts.json) return printJson({ ...out, reason: r.reason, tool_call: r.tool_call });
        console.log(r.done ? `done (${r.reason}): score ${r.score}, final answer ${JSON.stringify(r.final_answer)}` : `continue (${r.reason})\nobservation: ${r.observation}`);
      }),
    );
}
