// tempo-rl demo: the main job on embedded defaults (configs/cpu-tiny.yaml): starts what is not
// running, runs a short multi-turn GRPO job, shows progress, says where to look, stops what it started.
import path from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config/load.js';
import { REPO_ROOT } from '../lib/paths.js';
import { startOrContinueRun } from '../lib/run-client.js';
import { serverStatus } from '../lib/server.js';
import { ensureStack, stopStarted } from '../lib/stack.js';
import { connectClient } from '../lib/temporal.js';
import { writeReport } from '../lib/report.js';
import { action, globalFlags } from './common.js';
import { followRun } from './run-command.js';

export const DEMO_CONFIG = path.join(REPO_ROOT, 'configs', 'cpu-tiny.yaml');

export function register(program: Command): void {
  program
    .command('demo')
    .option('--data <dir>', 'a Geo3K directory (the layout of ../shared/data/geo3k) instead of the synthetic data')
    .option('--run-id <id>', 'run id (default: demo-<time>)')
    .description('the main job: a short multi-turn GRPO run on the embedded defaults')
    .action(
      action(async (opts: { data?: string; runId?: string }, cmd: Command) => {
        const flags = globalFlags(cmd);
        const sets = [...(opts.data ? ['dataset.kind=geo3k_dir', `dataset.path=${path.resolve(opts.data)}`] : []), ...(flags.set ?? [])];
        const cfg = loadConfig({ file: flags.config ?? DEMO_CONFIG, sets });
        const runId = opts.runId ?? `demo-${new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14)}`;
        const t0 = Date.now();
        process.stderr.write('starting what is not running: Temporal server, engine, rollout and trainer workers…\n');
        const started = await ensureStack(cfg);
        try {
          const ui = (await serverStatus(cfg)).ui;
          process.stderr.write(`Temporal UI: ${ui}/namespaces/${cfg.temporal.namespace}/workflows/run%2F${runId}\n`);
          await startOrContinueRun(await connectClient(cfg), cfg, runId);
          const result = await followRun(cfg, runId);
          const report = await writeReport(cfg, runId);
          const m = result.last_metrics;
          process.stdout.write(
            [
              `run ${runId}: ${result.status}, ${result.steps_done} steps in ${((Date.now() - t0) / 1000).toFixed(0)} s`,
              `last step: reward ${m['rollout/raw_reward']?.toFixed(3)}, response length ${m['rollout/response_len']?.toFixed(1)}, ` +
                `train/rollout logprob |diff| ${m['train/train_rollout_logprob_abs_diff']?.toExponential(2)}`,
              `Temporal UI: ${ui}  (workflow run/${runId}; the server stops with the demo — start your own with \`tempo-rl server start\`)`,
              `report:      ${report}`,
              `an episode:  bin/tempo-rl episodes show ${runId}/0/0/0`,
              `all of them: bin/tempo-rl episodes list ${runId}`,
              '',
            ].join('\n'),
          );
        } finally {
          await stopStarted(cfg, started);
        }
      }),
    );
}
