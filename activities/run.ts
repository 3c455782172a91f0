// Activities of the trainingRun workflow (all its I/O): the dataset snapshot, the prompts of a
// step, summaries of episodes already run, the engine list, and the step record.
import { promises as fs } from 'node:fs';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, WorkflowNotFoundError } from '@temporalio/common';
import path from 'node:path';
import type { DatasetConfig, TempoConfig } from '../config/schema.js';
import { writeFileAtomic, type BlobStore } from '../stores/blobstore.js';
import { loadDataset, type PromptRow } from '../lib/data/index.js';
import { DEFAULT_ENVIRONMENT, getEnvironment } from '../lib/env/registry.js';
import { engineUrls } from '../supervise/engines.js';
import { childLogger } from '../base/log.js';
import { runDir } from '../stores/layout.js';
import type { EpisodePrompt, EpisodePromptsInput, StepRecord } from '../protocol/activities.js';
import { episodeWorkflowId, type EpisodeSummary } from '../protocol/episode.js';
import { type DatasetInfo, LOGPROB_DIFF, logprobDiffWarning } from '../protocol/training-run.js';
import { readJsonRecordAsync } from '../base/bounded-file.js';

export type { StepRecord };

const log = childLogger('run');

/** Every step record of a run, in step order. */
export async function readStepRecords(dir: string): Promise<StepRecord[]> {
  const stepsDir = path.join(dir, 'steps');
  const names = (await fs.readdir(stepsDir).catch(() => [] as string[]))
    .filter((n) => /^step-\d+\.json$/.test(n))
    .sort();
  return Promise.all(names.map(async (n) => (await readJsonRecordAsync(path.join(stepsDir, n))) as StepRecord));
}

/** The held-out split of a run (GRPO or SFT), snapshotted once; none: eval is off, with a warning. */
export async function snapshotEval(
  store: BlobStore,
  runId: string,
  dataset: DatasetConfig,
  environment?: string,
): Promise<{ eval_ref: string | null; eval_size: number }> {
  let evalRows: PromptRow[] = [];
  try {
    evalRows = (await loadDataset(dataset, 'eval', store, environment)).rows;
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'no eval split; eval is off for this run');
  }
  const eval_ref = evalRows.length ? await store.putJson(`runs/${runId}/dataset-eval.json`, evalRows) : null;
  return { eval_ref, eval_size: evalRows.length };
}

export function runActivities(deps: { cfg: TempoConfig; store: BlobStore }) {
  const { cfg, store } = deps;
  return {
    /** Loads the run's dataset once, rows as the environment asks (absent: inputs made before
     *  environments were chosen, geo3k), and snapshots its rows (small: text + image refs). */
    async prepareDataset(input: {
      run_id: string;
      dataset: DatasetConfig;
      environment?: string;
      strata?: boolean;
    }): Promise<DatasetInfo> {
      const train = await loadDataset(input.dataset, 'train', store, input.environment);
      // The config refuses stratified for such a dataset; a plan made otherwise fails here, not as shuffle.
      if (input.strata && !train.strata)
        throw ApplicationFailure.nonRetryable(
          `rollout.prompt_order stratified: the dataset (dataset.kind ${input.dataset.kind}${input.dataset.synthetic_task ? `, synthetic_task ${input.dataset.synthetic_task}` : ''}) declares no strata`,
          'DatasetError',
        );
      for (const s of train.skipped) log.warn({ row: s.row, reason: s.reason }, 'dataset row skipped');
      const train_ref = await store.putJson(`runs/${input.run_id}/dataset-train.json`, train.rows);
      return {
        train_ref,
        train_size: train.rows.length,
        ...(input.strata ? { train_strata: train.strata } : {}),
        ...(await snapshotEval(store, input.run_id, input.dataset, input.environment)),
      };
    },

    /** The environment's prompt and initial state for each row. */
    async episodePrompts(input: EpisodePromptsInput): Promise<EpisodePrompt[]> {
      const env = getEnvironment(input.environment ?? DEFAULT_ENVIRONMENT);
      const rows = await store.getJson<PromptRow[]>(input.dataset_ref);
      return input.indices.map((i) => {
        const row = rows[i];
        if (!row) throw new Error(`dataset ${input.dataset_ref} has no row ${i}`);
        const built = env.prompt(row, { tools: input.multi_turn, systemPrompt: input.system_prompt ?? undefined });
        return {
          row_id: row.id,
          dataset_index: i,
          label: row.answer,
          prompt: { messages: built.messages, tools: built.tools },
          env_state: env.initialState(row),
        };
      });
    },

    /** Episodes of the async window that have not reported to the run: a completed one gives its
     *  summary (its workflow result), one still running 'running', one that ended without a result
     *  (terminated, failed, cancelled) or never started 'gone'. */
    async episodeOutcomes(input: { ids: string[] }): Promise<Array<EpisodeSummary | 'running' | 'gone'>> {
      const { client } = Context.current();
      return Promise.all(
        input.ids.map(async (id): Promise<EpisodeSummary | 'running' | 'gone'> => {
          const handle = client.workflow.getHandle(episodeWorkflowId(id));
          try {
            const status = (await handle.describe()).status.name;
            if (status === 'RUNNING') return 'running';
            if (status === 'COMPLETED') return (await handle.result()) as EpisodeSummary;
            return 'gone';
          } catch (err) {
            if (err instanceof WorkflowNotFoundError) return 'gone';
            throw err;
          }
        }),
      );
    },

    async listEngines(): Promise<string[]> {
      return engineUrls(cfg);
    },

    /** Writes the step record (idempotent: one file per step) and rebuilds metrics.jsonl. */
    async recordStep(rec: StepRecord): Promise<void> {
      const dir = runDir(cfg, rec.run_id);
      await writeFileAtomic(
        path.join(dir, 'steps', `step-${String(rec.step).padStart(6, '0')}.json`),
        JSON.stringify(rec),
      );
      const all = await readStepRecords(dir);
      const lines = all.map((r) => JSON.stringify({ step: r.step, weight_version: r.weight_version, ...r.metrics }));
      await writeFileAtomic(path.join(dir, 'metrics.jsonl'), `${lines.join('\n')}\n`);
      log.info({ run: rec.run_id, step: rec.step, reward: rec.metrics['rollout/raw_reward'] }, 'step recorded');
      const drift = logprobDiffWarning(rec.step, rec.metrics);
      if (drift) log.warn({ run: rec.run_id, step: rec.step, diff: rec.metrics[LOGPROB_DIFF] }, drift);
    },
  };
}
