// What the Temporal server knows of the runs: their workflow executions (one visibility query for
// all of them), each execution's plan (its start event's input, read as a one-event history page),
// and a running run's progress (its query, bounded in time: a run whose workers are gone has no one
// to answer it). Each look-up goes through the gate (ui/temporal-gate.ts): bounded, and null when
// the server does not answer.
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { runProgress } from '../client/run-client.js';
import {
  runIdOf,
  STATUS_ATTR,
  STEP_ATTR,
  TRAINING_RUN_WORKFLOW_TYPE,
  trainingRunWorkflowId,
  type RunPlan,
  type RunProgress,
  type RunState,
} from '../protocol/training-run.js';
import { childLogger } from '../base/log.js';
import { checkRunId } from '../stores/layout.js';
import type { TemporalGate } from './temporal-gate.js';

const log = childLogger('ui');

/** A run as its workflow executions tell it (the latest execution, the first one's start). */
export interface RunWorkflow {
  run_id: string;
  /** The latest execution's status: RUNNING, COMPLETED, FAILED, TERMINATED… */
  workflow_status: string;
  /** TempoRlStatus: running, paused, completed, stopped… (null before the run set it). */
  status: string | null;
  /** TempoRlStep: the next step to run. */
  step: number | null;
  started: string | null;
  ended: string | null;
  /** The latest execution's run id (its plan is read from its start event). */
  execution: string;
  task_queue: string;
}

/** Every training-run workflow on the server (or one run's), by run id; a continued run's executions
 *  fold into one. */
export async function runWorkflows(client: Client, runId?: string): Promise<Map<string, RunWorkflow>> {
  const latest = new Map<string, { wf: WorkflowExecutionInfo; firstStart: number }>();
  // a run id is letters, digits, '.', '_' and '-' (checkRunId): nothing to escape in the query
  const one = runId === undefined ? '' : ` AND WorkflowId = '${trainingRunWorkflowId(checkRunId(runId))}'`;
  for await (const wf of client.workflow.list({ query: `WorkflowType = '${TRAINING_RUN_WORKFLOW_TYPE}'${one}` })) {
    const id = runIdOf(wf.workflowId);
    const start = wf.startTime.getTime();
    const seen = latest.get(id);
    const firstStart = Math.min(start, seen?.firstStart ?? start);
    if (seen && seen.wf.startTime.getTime() > start) seen.firstStart = firstStart;
    else latest.set(id, { wf, firstStart });
  }
  const out = new Map<string, RunWorkflow>();
  for (const [run_id, { wf, firstStart }] of latest)
    out.set(run_id, {
      run_id,
      workflow_status: wf.status.name,
      status: wf.typedSearchAttributes.get(STATUS_ATTR) ?? null,
      step: wf.typedSearchAttributes.get(STEP_ATTR) ?? null,
      started: new Date(firstStart).toISOString(),
      ended: wf.status.name === 'RUNNING' ? null : (wf.closeTime?.toISOString() ?? null),
      execution: wf.runId,
      task_queue: wf.taskQueue,
    });
  return out;
}

const plans = new Map<string, RunPlan | null>();

/** The plan an execution started with (cached: an execution's input never changes; not cached when
 *  the server did not answer). */
export async function executionPlan(gate: TemporalGate, runId: string, execution: string): Promise<RunPlan | null> {
  if (plans.has(execution)) return plans.get(execution)!;
  let plan: RunPlan | null = null;
  try {
    const page = await gate.ask((client) =>
      client.workflowService.getWorkflowExecutionHistory({
        namespace: client.options.namespace,
        execution: { workflowId: trainingRunWorkflowId(runId), runId: execution },
        maximumPageSize: 1,
      }),
    );
    if (!page) return null;
    const payload = page.value.history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
    plan = payload ? (defaultPayloadConverter.fromPayload<RunState>(payload).plan ?? null) : null;
  } catch (err) {
    log.warn({ run: runId, err: (err as Error).message }, 'cannot read the plan of the run');
  }
  plans.set(execution, plan);
  return plan;
}

/** A running run's progress (step, phase, episodes), or null when no worker answers in time. */
export async function runningProgress(
  gate: TemporalGate,
  runId: string,
  timeoutMs = 2000,
): Promise<RunProgress | null> {
  try {
    return (
      (await gate.ask((client) => runProgress(client, runId), { deadlineMs: timeoutMs, timeoutIsDown: false }))
        ?.value ?? null
    );
  } catch {
    return null;
  }
}
