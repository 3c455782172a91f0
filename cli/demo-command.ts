// tempo-rl demo: the main job on embedded defaults (configs/cpu-tiny.yaml). Starts what is not
// running, warm-starts the tiny model by SFT on tool transcripts (once; cached), then runs multi-turn
// GRPO on the angle-facts task (docs/tasks.md), prints what was learnt, and stops what it started.
import path from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config/load.js';
import type { TempoConfig } from '../config/schema.js';
import { REPO_ROOT } from '../base/paths.js';
import { checkRunId } from '../stores/layout.js';
import { headlineLines, learningSummary } from '../lib/learning-summary.js';
import { writeReport } from '../lib/report.js';
import { startOrContinueRun } from '../client/run-client.js';
import { serverStatus } from '../supervise/server.js';
import { ensureStack, stopStarted, stopStartedOnSignal } from '../supervise/stack.js';
import { connectClient } from '../supervise/temporal.js';
import { withWarmStart } from '../client/warm-start.js';
import { readStepRecords } from '../activities/run.js';
import { runDir } from '../stores/layout.js';
import { action, globalFlags } from './common.js';
import { followRun } from './run-command.js';

export const DEMO_CONFIG = path.join(REPO_ROOT, 'configs', 'cpu-tiny.yaml');

function workflowUrl(ui: string, cfg: TempoConfig, runId: string): string {
  return `${ui}/namespaces/${cfg.temporal.namespace}/workflows/${encodeURIComponent(`run/${runId}`)}`;
}

/** The closing summary: the held-out eval before → after first, then the training reward's halves
 *  with their spread, the curve per step, and tool use (lib/learning-summary.ts). */
export async function demoSummary(cfg: TempoConfig, runId: string): Promise<string[]> {
  const rows = (await readStepRecords(runDir(cfg, runId))).map((r) => r.metrics);
  const curve = rows.map((r) => r['rollout/raw_reward']);
  const wrong = rows.reduce((a, r) => a + (r['rollout/wrong_first_answers'] ?? 0), 0);
  const recovered = rows.reduce(
    (a, r) => a + (r['rollout/recovery_rate'] ?? 0) * (r['rollout/wrong_first_answers'] ?? 0),
    0,
  );
  return [
    ...headlineLines(learningSummary(rows)),
    `training reward per step: ${curve.map((v) => (v === undefined ? 'n/a' : v.toFixed(2))).join(' ')}`,
    `right after a wrong first answer: ${wrong ? `${((100 * recovered) / wrong).toFixed(0)}%` : 'n/a'} of ${wrong} episodes`,
  ];
}

export function register(program: Command): void {
  program
    .command('demo')
    .option('--data <dir>', 'a Geo3K directory (train.jsonl / test.jsonl + images/) instead of the synthetic task')
    .option('--run-id <id>', 'run id (default: demo-<time>)')
    .description(
      'the main job: warm-start the tiny model by SFT (cached), then multi-turn GRPO on the embedded defaults',
    )
    .action(
      action(async (opts: { data?: string; runId?: string }, cmd: Command) => {
        const flags = globalFlags(cmd);
        const sets = [
          ...(opts.data ? ['dataset.kind=geo3k_dir', `dataset.path=${path.resolve(opts.data)}`] : []),
          ...(flags.set ?? []),
        ];
        // A model the user names (model.path, TEMPO_RL_MODEL) is trained as it is, without the warm start.
        const named = loadConfig({ file: flags.config ?? DEMO_CONFIG, sets: [...sets, 'model.warm_start=none'] });
        const cfg = named.model.path ? named : loadConfig({ file: flags.config ?? DEMO_CONFIG, sets });
        if (opts.data)
          process.stderr.write(
            'note: real Geo3K problems need arithmetic a generated tiny model cannot learn in minutes: expect the reward to stay near 0. ' +
              'The default demo (no --data) runs a task the tiny model can learn (docs/tasks.md).\n',
          );
        const runId = checkRunId(opts.runId ?? `demo-${new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14)}`);
        const t0 = Date.now();
        const phases: string[] = [];
        const lap = (name: string, since: number) =>
          phases.push(`${name} ${((Date.now() - since) / 1000).toFixed(0)} s`);
        process.stderr.write('starting what is not running: Temporal server, engine, rollout and trainer workers…\n');
        const started = await ensureStack(cfg);
        const disarmSignalStop = stopStartedOnSignal(cfg, started);
        lap('start-up', t0);
        try {
          const ui = (await serverStatus(cfg)).ui;
          const client = await connectClient(cfg);
          const tWarm = Date.now();
          const { cfg: rl, warm } = await withWarmStart(client, cfg, (id) => {
            process.stderr.write(
              `warm start: SFT of the tiny model on tool transcripts (run ${id}; once, then cached)\n`,
            );
            return followRun(cfg, id);
          });
          if (warm) lap(warm.built ? 'warm-start SFT' : 'warm start (cached)', tWarm);
          process.stderr.write(
            `policy: ${rl.model.path || 'the generated tiny model'}${warm ? '' : ' (as given: no warm start)'}\nTemporal UI: ${workflowUrl(ui, cfg, runId)}\n`,
          );
          const tRl = Date.now();
          await startOrContinueRun(client, rl, runId);
          const result = await followRun(rl, runId);
          lap('GRPO', tRl);
          const report = await writeReport(rl, runId);
          process.stdout.write(
            [
              `run ${runId}: ${result.status}, ${result.steps_done} GRPO steps; ${((Date.now() - t0) / 1000).toFixed(0)} s in all (${phases.join(', ')})`,
              ...(await demoSummary(rl, runId)),
              `report:       ${report}`,
              `an episode:   bin/tempo-rl episodes show ${runId}/0/0/0`,
              `all of them:  bin/tempo-rl episodes list ${runId}`,
              started.server
                ? `history:      the demo's Temporal server stops now; \`bin/tempo-rl server start\` brings it back on the same SQLite file, then open ${workflowUrl(ui, cfg, runId)}`
                : `history:      ${workflowUrl(ui, cfg, runId)}`,
              '',
            ].join('\n'),
          );
        } finally {
          disarmSignalStop();
          await stopStarted(cfg, started);
        }
      }),
    );
}
