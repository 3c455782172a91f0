// Episode and trainingRun histories as replay fixtures (tests/fixtures/histories/*.json): the History
// proto as readable JSON (protobufjs toObject: int64 as strings, enums by name, bytes as base64). Not
// the SDK's historyToJSON: it breaks on the two protobufjs copies the SDK installs. Tests record only
// when TEMPO_RL_RECORD_HISTORIES=1 (which tests write which fixture, and the command that records them
// all again: tests/ts/replay-episodes.test.ts); CI replays what is committed.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import proto from '@temporalio/proto';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { REPO_ROOT } from '../base/paths.js';

export const HISTORY_FIXTURES = path.join(REPO_ROOT, 'tests', 'fixtures', 'histories');
const HistoryType = proto.temporal.api.history.v1.History;

/** `runId`: one run of a workflow that continued as new (default: the latest). */
export async function recordHistory(client: Client, workflowId: string, name: string, runId?: string): Promise<void> {
  if (process.env.TEMPO_RL_RECORD_HISTORIES !== '1') return;
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  const json = HistoryType.toObject(HistoryType.fromObject(history as object), {
    longs: String,
    enums: String,
    bytes: String,
  });
  mkdirSync(HISTORY_FIXTURES, { recursive: true });
  writeFileSync(
    path.join(HISTORY_FIXTURES, `${name}.json`),
    `${JSON.stringify({ workflow_id: workflowId, history: json }, null, 1)}\n`,
  );
}

export function loadHistoryFixture(file: string): { workflowId: string; history: History } {
  const raw = JSON.parse(readFileSync(file, 'utf8')) as { workflow_id: string; history: object };
  return { workflowId: raw.workflow_id, history: HistoryType.fromObject(raw.history) as History };
}

/** Every run of a workflow that continued as new, oldest first, as fixtures `<name>-<i>`. */
export async function recordHistoryChain(client: Client, workflowId: string, name: string): Promise<void> {
  if (process.env.TEMPO_RL_RECORD_HISTORIES !== '1') return;
  const runs: string[] = [];
  for (let run: string | undefined = (await client.workflow.getHandle(workflowId).describe()).runId; run; ) {
    runs.unshift(run);
    const history = await client.workflow.getHandle(workflowId, run).fetchHistory();
    run = history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
  }
  for (const [i, run] of runs.entries()) await recordHistory(client, workflowId, `${name}-${i}`, run);
}
