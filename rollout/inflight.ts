// The in-flight ledger (docs/ARCHITECTURE.md "Recovery"): a worker process notes the task token of
// each activity it runs, in a folder of its own under its stack's state dir. A worker of the same
// kind and stack that starts later on this host (a restart, or a trainer standby taking over) fails
// the activities of processes that died, at once and retryably, so the server schedules their retry
// now instead of after a heartbeat or start-to-close timeout. The timeouts stay the fallback (a dead
// host, a ledger on another machine). The trainer keeps the same ledger in Python (workers/trainer/worker/inflight.py).
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Context } from '@temporalio/activity';
import type { ActivityInterceptorsFactory } from '@temporalio/worker';
import { isAlive } from '../supervise/process.js';
import { readJsonRecord } from '../base/bounded-file.js';

/** What a failed-over activity's failure says (its `type`), in the history of its next attempt. */
export const WORKER_DIED = 'WorkerDied';

/** A process's start time (clock ticks since boot, /proc/PID/stat field 22), '' where unknown: with the pid it names one process. */
export function processStartTime(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  } catch {
    return '';
  }
}

interface Entry {
  task_token: string; // base64
  activity_type: string;
  activity_id: string;
  workflow_id: string;
}

const processDirName = (pid: number) => `${pid}-${processStartTime(pid)}-${os.hostname()}`;

/** The ledger of one worker kind of a stack: `root` is `<state_dir>/workers/inflight/<kind>`. */
export class InflightLedger {
  readonly dir: string;

  constructor(readonly root: string) {
    this.dir = path.join(root, processDirName(process.pid));
  }

  /** Notes each (regular) activity this process runs while it runs. */
  interceptor(): ActivityInterceptorsFactory {
    return () => ({
      inbound: {
        execute: async (input, next) => {
          // A local activity has no task of its own to fail over: a dead worker's workflow task is
          // retried whole, local activities included.
          const info = Context.current().info;
          if (info.isLocal) return next(input);
          const file = this.note(info);
          try {
            return await next(input);
          } finally {
            if (file)
              try {
                unlinkSync(file);
              } catch {}
          }
        },
      },
    });
  }

  /** The note's path, or null when it could not be written: the ledger only speeds recovery up, so
   *  a full disk or a removed folder never fails the activity itself. */
  private note(info: Context['info']): string | null {
    const token = Buffer.from(info.taskToken);
    const file = path.join(this.dir, `${createHash('sha256').update(token).digest('hex').slice(0, 32)}.json`);
    const entry: Entry = {
      task_token: token.toString('base64'),
      activity_type: info.activityType,
      activity_id: info.activityId,
      workflow_id: info.workflowExecution?.workflowId ?? '',
    };
    for (let tries = 0; tries < 2; tries++) {
      try {
        writeFileSync(file, JSON.stringify(entry));
        return file;
      } catch {
        try {
          mkdirSync(this.dir, { recursive: true });
        } catch {}
      }
    }
    return null;
  }

  /** Fails, through `fail`, every activity that a dead process of this host left in the ledger, then
   *  removes its folder. Returns the activities failed over. A `fail` that throws (the attempt already
   *  ended or timed out) is ignored: there is nothing left to hand over. */
  async failOverDead(fail: (taskToken: Uint8Array, reason: string, entry: Entry) => Promise<void>): Promise<Entry[]> {
    const host = os.hostname();
    const done: Entry[] = [];
    let names: string[] = [];
    try {
      names = readdirSync(this.root);
    } catch {
      return done;
    }
    for (const name of names) {
      const [pidText, start, ...rest] = name.split('-');
      const pid = Number(pidText);
      if (rest.join('-') !== host || !Number.isInteger(pid) || pid === process.pid) continue;
      if (isAlive(pid) && processStartTime(pid) === start) continue;
      const dir = path.join(this.root, name);
      for (const file of readdirSync(dir)) {
        let entry: Entry;
        try {
          entry = readJsonRecord(path.join(dir, file)) as Entry;
        } catch {
          continue; // cut short by the death it records
        }
        const reason = `worker process ${pid} on ${host} died while running ${entry.activity_type} (${entry.workflow_id}); failed over by process ${process.pid}`;
        try {
          await fail(Buffer.from(entry.task_token, 'base64'), reason, entry);
          done.push(entry);
        } catch {}
      }
      rmSync(dir, { recursive: true, force: true });
    }
    return done;
  }

  /** This process's own folder, on a clean exit. */
  close(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
