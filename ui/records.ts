// The step records of a run (<state>/runs/<run>/steps/step-N.json), read once each: a record is
// written once when its step commits (a retried step writes the same record), so the pages that poll
// a live run read only the records that are new since the last poll.
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { TempoConfig } from '../config/schema.js';
import { readJsonRecordAsync } from '../base/bounded-file.js';
import { checkRunId, stateLayout } from '../stores/layout.js';
import type { StepRecord } from '../protocol/activities.js';

const STEP_FILE = /^step-\d+\.json$/;

export function runFolder(cfg: TempoConfig, runId: string): string {
  return path.join(stateLayout(cfg.state_dir).runs, checkRunId(runId));
}

/** The run ids of the folders under <state>/runs (names that are not run ids are left out). */
export async function runFolders(cfg: TempoConfig): Promise<string[]> {
  const entries = await fs.readdir(stateLayout(cfg.state_dir).runs, { withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isDirectory() && isRunId(e.name)).map((e) => e.name);
}

function isRunId(name: string): boolean {
  try {
    checkRunId(name);
    return true;
  } catch {
    return false;
  }
}

export async function runFolderExists(cfg: TempoConfig, runId: string): Promise<boolean> {
  return (await fs.stat(runFolder(cfg, runId)).catch(() => null))?.isDirectory() ?? false;
}

const cache = new Map<string, StepRecord>();

/** Every step record of a run, in step order, with the time the last one was written. */
export async function stepRecords(
  cfg: TempoConfig,
  runId: string,
): Promise<{ records: StepRecord[]; lastWritten: string | null }> {
  const dir = path.join(runFolder(cfg, runId), 'steps');
  const names = (await fs.readdir(dir).catch(() => [] as string[])).filter((n) => STEP_FILE.test(n)).sort();
  const records = await Promise.all(
    names.map(async (n) => {
      const file = path.join(dir, n);
      let rec = cache.get(file);
      // a FIFO or device is refused, a truncated record named (base/bounded-file.ts)
      if (!rec) cache.set(file, (rec = (await readJsonRecordAsync(file)) as StepRecord));
      return rec;
    }),
  );
  const last = names.at(-1);
  const lastWritten = last
    ? ((await fs.stat(path.join(dir, last)).catch(() => null))?.mtime.toISOString() ?? null)
    : null;
  return { records, lastWritten };
}

/** Forgets the records of a state dir (a test or bench that rewrites a run in place). */
export function forgetRecords(): void {
  cache.clear();
}
