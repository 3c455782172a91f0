// The tempo-rl command. Each group of subcommands lives in its own module and registers itself.
import { Command } from 'commander';
import { failWith } from './common.js';

const program = new Command('tempo-rl')
  .description('Durable GRPO post-training for vision-language models on Temporal')
  .option('-c, --config <file>', 'YAML config file')
  .option('--set <key=value>', 'override one config key (repeatable), e.g. --set rollout.max_turns=2', (v: string, prev: string[] = []) => [...prev, v])
  .showHelpAfterError();

// One line per command module.
const modules = [
  () => import('./config-command.js'),
  () => import('./server-command.js'),
  () => import('./worker-command.js'),
];

for (const load of modules) (await load()).register(program);

program.exitOverride((err) => {
  if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help') process.exit(0);
  process.exit(2);
});

try {
  await program.parseAsync(process.argv);
} catch (err) {
  failWith(err);
}
