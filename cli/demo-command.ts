// tempo-rl demo: the main job on embedded defaults (configs/cpu-tiny.yaml). Starts what is not
// running, warm-starts the tiny model by SFT on tool transcripts (once; cached), then runs multi-turn
// GRPO on the angle-facts task (docs/tasks.md), prints what was learnt, and stops what it started.
import path from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config/load.js';
import type { TempoConfig } from '../config/schema.js';
import { REPO_ROOT } from '../lib/paths.js';
import { writeReport } from '../lib/report.js';
import { startOrContinueRun } from '../lib/run-client.js';
import { serverStatus } from '../lib/server.js';
import { ensureStack, stopStarted, stopStartedOnSignal } from '../lib/stack.js';
import { connectClient } from '../lib/temporal.js';
import { ensureWarmStart } from '../lib/warm-start.js';
import { readStepRecords, runDir } from '../activities/run.js';
import { action, globalFlags } from './common.js';
import { followRun } from './run-command.js';

export const DEMO_CONFIG = path.join(REPO_ROOT, 'configs', 'cpu-tiny.yaml');

const f3 = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? 'n/a' : v.toFixed(3));
const pct = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? 'n/a' : `${(100 * v).toFixed(0)}%`);

function workflowUrl(ui: string, cfg: TempoConfig, runId: string): string {
  return `${ui}/namespaces/${cfg.temporal.namespace}/workflows/${encodeURIComponent(`run/${runId}`)}`;
}

/** The closing summary: the curve's ends, eval before/after, tool use, time per phase. */
export async function demoSummary(cfg: TempoConfig, runId: string): Promise<string[]> {
  const rows = (await readStepRecords(runDir(cfg, runId))).map((r) => r.metrics);
  const first = rows[0] ?? {};
  const last = rows[rows.length - 1] ?? {};
  const mean = (k: string) => rows.reduce((a, r) => a + (r[k] ?? 0), 0) / Math.max(rows.length, 1);
  const firstTwo = rows.slice(0, 2).reduce((a, r) => a + (r['rollout/raw_reward'] ?? 0), 0) / Math.min(2, Math.max(rows.length, 1));
  const lastTwo = rows.slice(-2).reduce((a, r) => a + (r['rollout/raw_reward'] ?? 0), 0) / Math.min(2, Math.max(rows.length, 1));
  const wrong = rows.reduce((a, r) => a + (r['rollout/wrong_first_answers'] ?? 0), 0);
  const recovered = rows.reduce((a, r) => a + (r['rollout/recovery_rate'] ?? 0) * (r['rollout/wrong_first_answers'] ?? 0), 0);
  return [
    `reward per step:        ${rows.map((r) => f3(r['rollout/raw_reward'])).join(' ')}`,
    `reward first → last:    ${f3(first['rollout/raw_reward'])} → ${f3(last['rollout/raw_reward'])}  (mean of the first two ${f3(firstTwo)}, of the last two ${f3(lastTwo)})`,
    `held-out eval reward:   ${f3(first['eval_start/reward'])} before → ${f3(last['eval/reward'])} after`,
    `first answer right:     ${pct(first['eval_start/first_answer_correct'])} before → ${pct(last['eval/first_answer_correct'])} after (held-out)`,
    `turns with a parseable calc_score call: ${pct(mean('rollout/tool_call_rate'))} (first turns: ${pct(mean('rollout/first_turn_tool_call_rate'))})`,
    `right after a wrong first answer:       ${pct(wrong ? recovered / wrong : Number.NaN)} of ${wrong} episodes`,
  ];
}

export function register(program: Command): void {
  program
    .command('demo')
    .option('--data <dir>', 'a Geo3K directory (train.jsonl / test.jsonl + images/) instead of the synthetic task')
    .option('--run-id <id>', 'run id (default: demo-<time>)')
    .description('the main job: warm-start the tiny model by SFT (cached), then multi-turn GRPO on the embedded defaults')
    .action(
      action(async (opts: { data?: string; runId?: string }, cmd: Command) => {
        const flags = globalFlags(cmd);
        const sets = [...(opts.data ? ['dataset.kind=geo3k_dir', `dataset.path=${path.resolve(opts.data)}`] : []), ...(flags.set ?? [])];
        const cfg = loadConfig({ file: flags.config ?? DEMO_CONFIG, sets });
        if (opts.data)
          process.stderr.write(
            'note: real Geo3K problems need arithmetic a generated tiny model cannot learn in minutes: expect the reward to stay near 0. ' +
              'The default demo (no --data) runs a task the tiny model can learn (docs/tasks.md).\n',
          );
        const runId = opts.runId ?? `demo-${new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14)}`;
        const t0 = Date.now();
        const phases: string[] = [];
        const lap = (name: string, since: number) => phases.push(`${name} ${((Date.now() - since) / 1000).toFixed(0)} s`);
        process.stderr.write('starting what is not running: Temporal server, engine, rollout and trainer workers…\n');
        const started = await ensureStack(cfg);
        const disarmSignalStop = stopStartedOnSignal(cfg, started);
        lap('start-up', t0);
        try {
          const ui = (await serverStatus(cfg)).ui;
          const client = await connectClient(cfg);
          const tWarm = Date.now();
          // A model the user names is trained as it is; the warm start is for the generated tiny model.
          let policy = cfg.model.path;
          if (!policy) {
            const warm = await ensureWarmStart(client, cfg, (id) => {
              process.stderr.write(`warm start: SFT of the tiny model on tool transcripts (run ${id}; once, then cached)\n`);
              return followRun(cfg, id);
            });
            lap(warm.built ? 'warm-start SFT' : 'warm start (cached)', tWarm);
            policy = warm.model_dir;
          }
          process.stderr.write(`policy: ${policy}${cfg.model.path ? ' (model.path as given: no warm start)' : ''}\nTemporal UI: ${workflowUrl(ui, cfg, runId)}\n`);
          const rl = loadConfig({ file: flags.config ?? DEMO_CONFIG, sets: [...sets, `model.path=${policy}`] });
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
