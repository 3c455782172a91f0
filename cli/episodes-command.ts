// tempo-rl episodes show EPISODE [--json] | episodes list RUN [--step N] [--json]: the audit view of
// episodes, rebuilt from their Temporal histories and the blob store.
import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { auditEpisode, listEpisodes, type EpisodeAudit } from '../client/audit.js';
import { closeBlobStore, openConfiguredBlobStore } from '../lib/blob-store-config.js';
import { connectClient, temporalAddress } from '../supervise/temporal.js';
import type { TempoConfig } from '../config/schema.js';
import { serverStatus, startServer, stopServerIfUnused } from '../supervise/server.js';
import { readStepRecords } from '../activities/run.js';
import { runDir } from '../stores/layout.js';
import { runExists } from '../client/run-client.js';
import { parseEpisodeId } from '../protocol/episode.js';
import { trainingRunWorkflowId } from '../protocol/training-run.js';

/** A client for the look-up. Histories live in the embedded server's SQLite file: start the server
 * for the look-up if it is down, and stop it again unless something else has come to use it. */
async function withClient<T>(cfg: TempoConfig, fn: (client: Client) => Promise<T>): Promise<T> {
  const start = !cfg.temporal.address && !(await serverStatus(cfg)).running ? await startServer(cfg) : null;
  const client = await connectClient(cfg);
  try {
    return await fn(client);
  } finally {
    await client.connection.close();
    if (start?.started && start.status.pid !== null) await stopServerIfUnused(cfg, start.status.pid);
  }
}

/** episode id → the train step that consumed its sample (from the run's step records). */
async function consumedBy(cfg: TempoConfig, run: string): Promise<Map<string, number>> {
  const map = new Map<string, number>();
  for (const rec of await readStepRecords(runDir(cfg, run)))
    for (const e of rec.episodes) if (e.trained) map.set(e.episode_id, rec.step);
  return map;
}
import { checkRunId } from '../stores/layout.js';
import { action, configFrom, printable, printJson } from './common.js';

function printAudit(a: EpisodeAudit): void {
  console.log(
    `episode ${a.episode_id}  (workflow ${a.workflow_id}, ${a.workflow_status})  environment ${a.environment ?? '-'}`,
  );
  console.log(
    `status ${a.status ?? '-'}${a.truncated_reason ? ` (${a.truncated_reason})` : ''}  reward ${a.reward ?? '-'}  weight version ${a.weight_version ?? '-'}  prompt ${a.prompt_len ?? '-'} tokens`,
  );
  for (const t of a.turns) {
    const lp = t.mean_logprob === null ? '-' : t.mean_logprob.toFixed(3);
    console.log(
      `\n── turn ${t.turn}: ${t.generated_tokens} generated${t.synthetic_eos ? ' + synthetic EOS' : ''}, ${t.observation_tokens} observation tokens, finish ${t.finish_reason}, mean logprob ${lp}, engine ${t.engine}, weights v${t.weight_version ?? '-'}${(t.generate_attempt ?? 1) > 1 ? `, attempt ${t.generate_attempt} after ${t.generate_retried_after ?? 'a failure'}` : ''}${t.env_reason ? `, env: ${t.env_reason}` : ''}`,
    );
    // the model's text and the tool's feedback, never escape sequences for the terminal
    console.log(printable(t.text));
    if (t.observation) console.log(`[observation] ${printable(t.observation)}`);
  }
  const inv = a.invariants;
  if (inv)
    console.log(
      `\ninvariants ${inv.ok ? 'ok' : 'VIOLATED'}: response ${inv.response_length}, loss_mask ${inv.loss_mask_length}, logprobs ${inv.logprobs_length}, mask sum ${inv.mask_sum}${inv.problems.length ? `\n  ${inv.problems.join('\n  ')}` : ''}`,
    );
  else console.log('\nno sample stored yet');
}

export function register(program: Command): void {
  const episodes = program.command('episodes').description('the audit view of episodes');
  episodes
    .command('show <episode>')
    .description('turns, token counts, finish reasons, logprobs, engines, reward, status, invariants')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (episode: string, opts: { json?: boolean }, cmd: Command) => {
        const cfg = configFrom(cmd);
        await withClient(cfg, async (client) => {
          const store = await openConfiguredBlobStore(cfg);
          const audit = await auditEpisode(client, store, episode).finally(() => closeBlobStore(store));
          if (opts.json) printJson(audit);
          else printAudit(audit);
        });
      }),
    );
  episodes
    .command('list <run>')
    .description('the episodes of a run (workflow ids episode/<run>/<step>/…)')
    .option('--step <n>', 'only this step')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (run: string, opts: { step?: string; json?: boolean }, cmd: Command) => {
        checkRunId(run);
        // digits only: Number() would read '' as 0 and '1e1' as 10
        const step = opts.step === undefined ? undefined : /^\d+$/.test(opts.step) ? Number(opts.step) : Number.NaN;
        if (step !== undefined && !Number.isSafeInteger(step))
          throw Object.assign(new Error(`--step ${JSON.stringify(opts.step)}: expected an integer ≥ 0`), {
            exitCode: 2,
          });
        const cfg = configFrom(cmd);
        await withClient(cfg, async (client) => {
          const trainedAt = await consumedBy(cfg, run);
          const list = (await listEpisodes(client, run, step)).map((e) => {
            const id = parseEpisodeId(e.episode_id);
            return {
              ...e,
              step: id.step,
              prompt_index: id.prompt_index,
              sample_index: id.sample_index,
              train_step: trainedAt.get(e.episode_id) ?? null,
            };
          });
          // an empty list for a run that does not exist would make a typo look like an empty run
          if (list.length === 0 && !(await runExists(client, run)))
            throw new Error(
              `no run ${JSON.stringify(run)}: no workflow ${trainingRunWorkflowId(run)} and no episodes on ${temporalAddress(cfg)}`,
            );
          if (opts.json) return printJson({ run_id: run, step: step ?? null, episodes: list });
          if (list.length === 0) console.log(`no episodes of run ${run}${step === undefined ? '' : ` step ${step}`}`);
          for (const e of list)
            console.log(
              `${e.episode_id}\t${e.workflow_status}\t${e.status ?? '-'}\treward ${e.reward ?? '-'}\t${e.response_len ?? '-'} tokens\t${e.turns ?? '-'} turns\ttrained at step ${e.train_step ?? '-'}`,
            );
        });
      }),
    );
}
