// What `tempo-rl train --detach` started for a run (server, engines, workers) is recorded under the
// state dir, so that `tempo-rl stop RUN` can stop it once the run has ended, unless other runs of
// the same stack still need it.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import type { TempoConfig } from '../config/schema.js';
import { stateLayout } from '../stores/layout.js';
import { runHandle } from './run-client.js';
import { describeStarted, stopStarted, type Started } from '../supervise/stack.js';
import { runIdOf, TRAINING_RUN_WORKFLOW_TYPE, trainingRunWorkflowId } from '../protocol/training-run.js';
import { readJsonRecord } from '../base/bounded-file.js';

function recordPath(cfg: TempoConfig, runId: string): string {
  return path.join(stateLayout(cfg.state_dir).detachedRuns, `${runId}.json`);
}

export function detachedStart(cfg: TempoConfig, runId: string): Started | null {
  try {
    return readJsonRecord(recordPath(cfg, runId)) as Started;
  } catch {
    return null;
  }
}

/** Records (merged with any earlier record of the run) what a detached start started. */
export function recordDetachedStart(cfg: TempoConfig, runId: string, started: Started): void {
  const before = detachedStart(cfg, runId);
  const merged: Started = { ...started };
  if (before) for (const k of Object.keys(merged) as Array<keyof Started>) merged[k] ||= before[k];
  if (!describeStarted(merged).length) return;
  mkdirSync(path.dirname(recordPath(cfg, runId)), { recursive: true });
  writeFileSync(recordPath(cfg, runId), JSON.stringify(merged));
}

/** Other training runs still running on this stack's rollout queue (the queue their workflows run on). */
async function otherRunsOfStack(client: Client, cfg: TempoConfig, runId: string): Promise<string[]> {
  const others: string[] = [];
  // The queue is compared here, not in the query: a configured name may hold any character.
  for await (const wf of client.workflow.list({
    query: `WorkflowType = '${TRAINING_RUN_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'`,
  })) {
    if (wf.taskQueue === cfg.temporal.task_queues.rollout && wf.workflowId !== trainingRunWorkflowId(runId))
      others.push(runIdOf(wf.workflowId));
  }
  return others;
}

export interface DetachedStop {
  stopped: string[];
  /** Kept for runs of this stack still running (and recorded for the first of them, kept_for[0]). */
  kept: string[];
  kept_for: string[];
}

/** Waits for the run to end, then stops what its detached start started; null: nothing recorded. */
export async function stopDetachedStart(client: Client, cfg: TempoConfig, runId: string): Promise<DetachedStop | null> {
  const started = detachedStart(cfg, runId);
  if (!started) return null;
  // Failed or terminated ends the run just the same.
  await runHandle(client, runId)
    .result()
    .catch(() => undefined);
  const others = await otherRunsOfStack(client, cfg, runId);
  rmSync(recordPath(cfg, runId), { force: true });
  if (others.length) {
    recordDetachedStart(cfg, others[0]!, started);
    return { stopped: [], kept: describeStarted(started), kept_for: others };
  }
  return { stopped: await stopStarted(cfg, started), kept: [], kept_for: [] };
}
