// Small activities about the worker itself, used by the round-trip and durability tests.
import { existsSync } from 'node:fs';
import { Context } from '@temporalio/activity';
import type { BlobStore } from '../stores/blobstore.js';
import type { RolloutInfo } from '../lib/contract.js';
import { RECORD_FILE, readBoundedTextAsync } from '../lib/bounded-file.js';

export function systemActivities(deps: { store: BlobStore }) {
  return {
    /** Which worker answered: its process and the blob store (the stack) it serves. */
    async rolloutInfo(): Promise<RolloutInfo> {
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
