// Client-side control of training runs: start (or continue), follow, query, pause/resume/stop.
import { ApplicationFailure, type Client, WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import type { TempoConfig } from '../config/schema.js';
import { portOpen } from '../supervise/process.js';
import { initialRunState } from '../config/run-plan.js';
import { WORKFLOW_TASK_TIMEOUT } from '../protocol/episode.js';
import { connectClient, temporalAddress } from '../supervise/temporal.js';
import {
  pauseUpdate,
  progressQuery,
  REFUSED,
  resumeUpdate,
  stopUpdate,
  trainingRunWorkflowId,
  TRAINING_RUN_WORKFLOW_TYPE,
  type Ack,
  type RunProgress,
  type RunResult,
  type RunState,
} from '../protocol/training-run.js';

/** The state a new execution should start from (the last one's result, or its latest input), and
 *  the task queue it ran on. */
async function lastState(
  client: Client,
  runId: string,
): Promise<{ state: RunState; running: boolean; taskQueue: string } | null> {
  const handle = client.workflow.getHandle(trainingRunWorkflowId(runId));
  let desc;
  try {
    desc = await handle.describe();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  }
  const taskQueue = desc.taskQueue;
  if (desc.status.name === 'RUNNING') return { state: null as unknown as RunState, running: true, taskQueue };
  if (desc.status.name === 'COMPLETED') {
    const result = (await handle.result()) as RunResult;
    return { state: result.state, running: false, taskQueue };
  }
  // Failed, terminated, timed out: the input of the latest execution is the state after its last step.
  const latest = client.workflow.getHandle(trainingRunWorkflowId(runId), desc.runId);
  const history = await latest.fetchHistory();
  const started = history.events?.[0]?.workflowExecutionStartedEventAttributes;
  const payload = started?.input?.payloads?.[0];
  if (!payload?.data) throw new Error(`run ${runId}: cannot read the state of its last execution`);
  return { state: JSON.parse(Buffer.from(payload.data).toString('utf8')) as RunState, running: false, taskQueue };
}

/**
 * A run continues on the task queues it started on: only the workers of the stack that holds its
 * samples and checkpoints (its blob root, its run dir) can serve it.
 */
function checkSameStack(runId: string, last: { state: RunState; taskQueue: string }, cfg: TempoConfig): void {
  const queues = cfg.temporal.task_queues;
  const plan = last.state.plan;
  if (last.taskQueue === queues.rollout && plan.trainer_task_queue === queues.trainer) return;
  const message =
    `run ${runId} was started on task queues rollout=${last.taskQueue}, trainer=${plan.trainer_task_queue} ` +
    `(blob store ${plan.blob_store}), but this config's workers poll rollout=${queues.rollout}, trainer=${queues.trainer} ` +
    `(state dir ${cfg.state_dir}): continue it with the state_dir it started with, or set temporal.task_queues.rollout ` +
    `and temporal.task_queues.trainer to its queues`;
  throw Object.assign(new Error(message), { exitCode: 2 });
}

export interface StartedRun {
  runId: string;
  resumedFromStep: number | null;
  alreadyRunning: boolean;
}

export async function startOrContinueRun(client: Client, cfg: TempoConfig, runId: string): Promise<StartedRun> {
  const last = await lastState(client, runId);
  if (last?.running) return { runId, resumedFromStep: null, alreadyRunning: true };
  let state = initialRunState(cfg, runId);
  let resumedFromStep: number | null = null;
  if (last) {
    checkSameStack(runId, last, cfg);
    // Continue exactly where it stopped; the config may extend the number of steps.
    state = {
      ...last.state,
      paused: false,
      engines_synced: false,
      plan: { ...last.state.plan, steps: Math.max(cfg.run.steps, last.state.plan.steps) },
    };
    resumedFromStep = state.step;
  }
  await client.workflow.start(TRAINING_RUN_WORKFLOW_TYPE, {
    taskQueue: cfg.temporal.task_queues.rollout,
    workflowId: trainingRunWorkflowId(runId),
    workflowTaskTimeout: WORKFLOW_TASK_TIMEOUT,
    args: [state],
  });
  return { runId, resumedFromStep, alreadyRunning: false };
}

export function runHandle(client: Client, runId: string) {
  return client.workflow.getHandle(trainingRunWorkflowId(runId));
}

/**
 * A client for looking at or steering a run. The SDK retries a dead address for ~10 s before it
 * says anything; a TCP probe first fails at once and names the address.
 */
export async function connectToRuns(cfg: TempoConfig): Promise<Client> {
  await checkTemporalAnswers(cfg);
  return connectClient(cfg);
}

/** A TCP probe of the Temporal frontend: an error naming the address and where it came from when
 *  nothing answers there (the trainer's SDK printed a 33-line traceback instead). */
export async function checkTemporalAnswers(cfg: TempoConfig): Promise<void> {
  const address = temporalAddress(cfg);
  const colon = address.lastIndexOf(':');
  const host = colon > 0 ? address.slice(0, colon).replace(/^\[|\]$/g, '') : address;
  const port = colon > 0 ? Number(address.slice(colon + 1)) : 7233;
  if (!(await portOpen(host, port, 2000)))
    throw new Error(
      `no Temporal server answers at ${address} ` +
        (cfg.temporal.address
          ? '(temporal.address / TEMPORAL_ADDRESS)'
          : '(the embedded server is not running: tempo-rl server start)'),
    );
}

/** The run's workflow description; a run that does not exist is an error naming it. */
async function describeRun(client: Client, runId: string) {
  try {
    return await runHandle(client, runId).describe();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError)
      throw new Error(`no run ${JSON.stringify(runId)} (no workflow ${trainingRunWorkflowId(runId)})`);
    throw err;
  }
}

/** Whether the run's workflow is running; a run that does not exist is an error naming it. */
export async function runIsRunning(client: Client, runId: string): Promise<boolean> {
  return (await describeRun(client, runId)).status.name === 'RUNNING';
}

/** Whether a run (its training-run workflow) exists. */
export async function runExists(client: Client, runId: string): Promise<boolean> {
  try {
    await runHandle(client, runId).describe();
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

export async function runProgress(client: Client, runId: string): Promise<RunProgress & { workflow_status: string }> {
  const handle = runHandle(client, runId);
  const desc = await describeRun(client, runId);
  if (desc.status.name === 'RUNNING') return { ...(await handle.query(progressQuery)), workflow_status: 'RUNNING' };
  if (desc.status.name === 'COMPLETED') {
    const r = (await handle.result()) as RunResult;
    return {
      run_id: runId,
      status: r.status,
      step: r.steps_done,
      steps_total: r.state.plan.steps,
      phase: 'idle',
      episodes_done: 0,
      episodes_total: 0,
      weight_version: r.weight_version,
      metrics: r.last_metrics,
      workflow_status: 'COMPLETED',
    };
  }
  const last = await lastState(client, runId);
  const st = last!.state;
  return {
    run_id: runId,
    status: 'failed',
    step: st.step,
    steps_total: st.plan.steps,
    phase: 'idle',
    episodes_done: 0,
    episodes_total: 0,
    weight_version: st.weight_version,
    metrics: st.last_metrics,
    workflow_status: desc.status.name,
  };
}

export async function controlRun(
  client: Client,
  runId: string,
  what: 'pause' | 'pause-now' | 'resume' | 'stop',
): Promise<Ack> {
  await describeRun(client, runId);
  const handle = runHandle(client, runId);
  try {
    if (what === 'pause' || what === 'pause-now')
      return await handle.executeUpdate(pauseUpdate, { args: [{ mode: what === 'pause' ? 'after_step' : 'now' }] });
    if (what === 'resume') return await handle.executeUpdate(resumeUpdate);
    return await handle.executeUpdate(stopUpdate);
  } catch (err) {
    // A refusal (the update's validator): nothing changed in the run, and no event was recorded.
    const cause = err instanceof WorkflowUpdateFailedError ? err.cause : null;
    if (!(cause instanceof ApplicationFailure) || cause.type !== REFUSED) throw err;
    const p = await handle.query(progressQuery);
    return { accepted: false, status: p.status, message: cause.message };
  }
}
