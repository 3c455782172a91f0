// The tempo-rl command. Each group of subcommands lives in its own module and registers itself;
// only the module of the command being run is loaded, so small commands start fast.
import { Command } from 'commander';
import { failWith, printable } from './common.js';

type Register = { register(program: Command): void };

// One entry per top-level command: name → its module.
const commands: Record<string, string> = {
  config: './config-command.js',
  server: './server-command.js',
  worker: './worker-command.js',
  engine: './engine-command.js',
  model: './model-command.js',
  score: './score-command.js',
  data: './data-command.js',
  env: './env-command.js',
  episodes: './episodes-command.js',
  train: './run-command.js',
  status: './run-command.js',
  pause: './run-command.js',
  resume: './run-command.js',
  stop: './run-command.js',
  demo: './demo-command.js',
  report: './report-command.js',
  pack: './pack-command.js',
  ui: './ui-command.js',
};

const program = new Command('tempo-rl')
  .description('Durable GRPO post-training for vision-language models on Temporal')
  .option('-c, --config <file>', 'YAML config file')
  .option(
    '--set <key=value>',
    'override one config key (repeatable), e.g. --set rollout.max_turns=2',
    (v: string, prev: string[] = []) => [...prev, v],
  )
  .showHelpAfterError()
  // commander quotes what it did not understand as given: escape sequences there reach the terminal
  .configureOutput({ writeErr: (text) => process.stderr.write(printable(text)) })
  // Inherited by every subcommand: usage errors exit 2, and so does a missing command (bare
  // `tempo-rl`, `tempo-rl data`: commander prints the help on stderr); asked-for help exits 0.
  .exitOverride((err) => {
    if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') process.exit(0);
    process.exit(2);
  });

/** The first positional argument, skipping the global options and their values. */
function commandName(argv: string[]): string | undefined {
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '-c' || a === '--config' || a === '--set') i++;
    else if (!a.startsWith('-')) return a;
  }
  return undefined;
}

// `tempo-rl … | head` closes stdout early: that is not an error. A full disk (ENOSPC) is, without a trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  process.stderr.write(`tempo-rl: cannot write to stdout: ${err.message}\n`);
  process.exit(1);
});

const name = commandName(process.argv);
const selected = name && commands[name] ? [commands[name]] : [...new Set(Object.values(commands))];
for (const mod of selected) ((await import(mod)) as Register).register(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  failWith(err);
}
