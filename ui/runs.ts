// The runs page and a run's page: each run's status and progress from its workflow when the Temporal
// server answers, else from its step records; a run's metrics per step from its step records.
import { headlineLines, learningSummary } from '../lib/learning-summary.js';
import { childLogger } from '../base/log.js';
import { checkRunId } from '../stores/layout.js';
import type { StepRecord } from '../protocol/activities.js';
import { STEP_TIME_KEYS, trainingRunWorkflowId, type RunPlan } from '../protocol/training-run.js';
import { historyUrl, UiError, type UiContext } from './context.js';
import { runFolderExists, runFolders, stepRecords } from './records.js';
import { executionPlan, runningProgress, runWorkflows, type RunWorkflow } from './temporal-runs.js';

const log = childLogger('ui');

export interface RunRow {
  run_id: string;
  /** The run's status (running, paused, completed, stopped, failed…); 'recorded' when only its step
   *  records are known (no Temporal server answers). */
  status: string;
  workflow_status: string | null;
  /** A running run's phase (rollout, train, sync, record, eval…). */
  phase: string | null;
  /** Steps done. */
  step: number;
  steps_total: number | null;
  episodes_done: number | null;
  episodes_total: number | null;
  algorithm: 'grpo' | 'sft' | null;
  started: string | null;
  ended: string | null;
  last_recorded: string | null;
  last_reward: number | null;
  /** The held-out eval reward before training (eval_start/reward) and after the last eval (eval/reward). */
  eval_before: number | null;
  eval_after: number | null;
  /** The step whose eval is `eval_after`. */
  eval_after_step: number | null;
  source: 'temporal' | 'records';
  history_url: string | null;
}

/** The run's workflows, or null when the server does not answer (the page falls back to records). */
async function workflowsOrNull(ctx: UiContext, runId?: string): Promise<Map<string, RunWorkflow> | null> {
  try {
    return (await ctx.temporal.ask((client) => runWorkflows(client, runId)))?.value ?? null;
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'cannot list the runs’ workflows: runs from their step records');
    return null;
  }
}

function algorithmOf(plan: RunPlan | null, last: StepRecord | undefined): RunRow['algorithm'] {
  if (plan) return plan.algorithm ?? 'grpo';
  if (!last) return null;
  return 'sft/nll' in last.metrics || last.episodes.some((e) => e.episode_id.startsWith('sft/')) ? 'sft' : 'grpo';
}

function statusOf(wf: RunWorkflow | null, live: string | undefined): string {
  if (!wf) return 'recorded';
  if (live) return live;
  // a failed or terminated execution leaves its search attribute at the status it had
  if (wf.workflow_status !== 'RUNNING' && wf.workflow_status !== 'COMPLETED') return wf.workflow_status.toLowerCase();
  return wf.status ?? wf.workflow_status.toLowerCase();
}

async function runRow(
  ctx: UiContext,
  runId: string,
  wf: RunWorkflow | null,
): Promise<RunRow & { plan: RunPlan | null; records: StepRecord[] }> {
  const { records, lastWritten } = await stepRecords(ctx.cfg, runId);
  const last = records.at(-1);
  const plan = wf ? await executionPlan(ctx.temporal, runId, wf.execution) : null;
  const progress = wf?.workflow_status === 'RUNNING' ? await runningProgress(ctx.temporal, runId) : null;
  const running = wf?.workflow_status === 'RUNNING';
  return {
    run_id: runId,
    status: statusOf(wf, progress?.status),
    workflow_status: wf?.workflow_status ?? null,
    phase: running ? (progress?.phase ?? null) : null,
    step: progress?.step ?? wf?.step ?? (last ? last.step + 1 : 0),
    steps_total: progress?.steps_total ?? plan?.steps ?? null,
    episodes_done: running ? (progress?.episodes_done ?? null) : null,
    episodes_total: running ? (progress?.episodes_total ?? null) : null,
    algorithm: algorithmOf(plan, last),
    started: wf?.started ?? null,
    ended: wf?.ended ?? null,
    last_recorded: lastWritten,
    last_reward: last?.metrics['rollout/raw_reward'] ?? null,
    ...evalOf(records),
    source: wf ? 'temporal' : 'records',
    history_url: wf ? historyUrl(ctx, trainingRunWorkflowId(runId)) : null,
    plan,
    records,
  };
}

function evalOf(records: StepRecord[]): Pick<RunRow, 'eval_before' | 'eval_after' | 'eval_after_step'> {
  const before = records.find((r) => typeof r.metrics['eval_start/reward'] === 'number');
  const after = [...records].reverse().find((r) => typeof r.metrics['eval/reward'] === 'number');
  return {
    eval_before: before?.metrics['eval_start/reward'] ?? null,
    eval_after: after?.metrics['eval/reward'] ?? null,
    eval_after_step: after?.step ?? null,
  };
}

/** Every run of this state dir: its folders under runs/, and runs on this stack's task queue that
 *  have no folder yet (no step recorded). Newest first. A run that cannot be read (a truncated step
 *  record, a FIFO in its place) is left out with a note naming it and why, not the whole list. */
export async function listRuns(
  ctx: UiContext,
): Promise<{ temporal: boolean; runs: RunRow[]; skipped: Array<{ run_id: string; error: string }> }> {
  const workflows = await workflowsOrNull(ctx);
  const ids = new Set(await runFolders(ctx.cfg));
  for (const wf of workflows?.values() ?? [])
    if (wf.task_queue === ctx.cfg.temporal.task_queues.rollout) ids.add(wf.run_id);
  const rows: RunRow[] = [];
  const skipped: Array<{ run_id: string; error: string }> = [];
  const settled = await Promise.allSettled(
    [...ids].map(async (id) => {
      const { plan: _, records: __, ...row } = await runRow(ctx, id, workflows?.get(id) ?? null);
      return row;
    }),
  );
  [...ids].forEach((id, i) => {
    const s = settled[i]!;
    if (s.status === 'fulfilled') rows.push(s.value);
    else {
      const error = (s.reason as Error)?.message ?? String(s.reason);
      log.warn({ run: id, err: error }, 'run left out of the list: it cannot be read');
      skipped.push({ run_id: id, error });
    }
  });
  const when = (r: RunRow) => r.started ?? r.last_recorded ?? '';
  rows.sort((a, b) => when(b).localeCompare(when(a)) || a.run_id.localeCompare(b.run_id));
  return { temporal: workflows !== null, runs: rows, skipped };
}

export interface RunDetail {
  run: RunRow;
  /** The plan's GRPO shape, when the run's workflow is known. */
  plan: { prompts_per_step: number; n_samples_per_prompt: number; zero_std_filter: boolean } | null;
  steps: Array<{
    step: number;
    weight_version: number;
    metrics: Record<string, number>;
    episodes: number;
    trained: number;
  }>;
  step_time_keys: readonly string[];
  /** What the run learnt, in words (lib/learning-summary.ts, as the report and the demo say it): the
   *  held-out eval before → after first, then the training reward's halves, tool use, step 0. */
  summary: string[];
}

export async function runDetail(ctx: UiContext, runId: string): Promise<RunDetail> {
  checkRunId(runId);
  const wf = (await workflowsOrNull(ctx, runId))?.get(runId) ?? null;
  if (!wf && !(await runFolderExists(ctx.cfg, runId)))
    throw new UiError(
      404,
      `no run ${JSON.stringify(runId)}: no folder runs/${runId} in the state dir and no workflow ${trainingRunWorkflowId(runId)}`,
    );
  const { plan, records, ...run } = await runRow(ctx, runId, wf);
  return {
    run,
    plan: plan && {
      prompts_per_step: plan.prompts_per_step,
      n_samples_per_prompt: plan.n_samples_per_prompt,
      zero_std_filter: plan.zero_std_filter,
    },
    steps: records.map((r) => ({
      step: r.step,
      weight_version: r.weight_version,
      metrics: r.metrics,
      episodes: r.episodes.length,
      trained: r.episodes.filter((e) => e.trained).length,
    })),
    step_time_keys: STEP_TIME_KEYS,
    summary: records.length ? headlineLines(learningSummary(records.map((r) => ({ step: r.step, ...r.metrics })))) : [],
  };
}

/** The plan of a run's latest execution (null: no server, or no workflow). */
export async function runPlan(ctx: UiContext, runId: string): Promise<RunPlan | null> {
  const wf = (await workflowsOrNull(ctx, runId))?.get(runId);
  return wf ? executionPlan(ctx.temporal, runId, wf.execution) : null;
}
