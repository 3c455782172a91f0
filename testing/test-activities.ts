// Activities for tests only, served by the tests' rollout worker (testing/rollout-worker.ts) beside the
// product's: which worker answered (the round trip, stack isolation) and a wait on a file that the
// server's durability test kills the Temporal server under.
import { existsSync } from 'node:fs';
import { Context } from '@temporalio/activity';
import type { BlobStore } from '../stores/blobstore.js';
import { RECORD_FILE, readBoundedTextAsync } from '../base/bounded-file.js';
import type { TestRolloutActivities } from './test-contract.js';

export function testActivities(deps: { store: BlobStore }): TestRolloutActivities {
  return {
    /** Which worker answered: its process and the blob store (the stack) it serves. */
    async rolloutInfo() {
      return {
        node_version: process.version,
        platform: `${process.platform}-${process.arch}`,
        worker_pid: process.pid,
        blob_store: deps.store.uri,
      };
    },
    waitForFile,
  };
}

/** Blocks (heartbeating) until `path` exists; returns its content and which attempt read it. */
async function waitForFile(input: { path: string; label: string }): Promise<string> {
  const ctx = Context.current();
  for (;;) {
    if (existsSync(input.path)) return `${input.label}:${(await readBoundedTextAsync(input.path, RECORD_FILE)).trim()}`;
    ctx.heartbeat();
    await ctx.sleep(200);
  }
}
