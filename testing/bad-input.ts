// Shared by the bad-input tables: temp folders, files, snapshots of what is on disk, ports.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT } from '../base/paths.js';
export const BIN = path.join(REPO_ROOT, 'bin', 'tempo-rl');
export const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-bad-input-'));
let n = 0;
/** A new counter value (unique names across the tables). */
export const next = () => ++n;
export const fresh = (name = 'd') => {
  const d = path.join(tmp, `${name}-${++n}`);
  mkdirSync(d, { recursive: true });
  return d;
};
export const file = (name: string, content: string | Buffer) => {
  const f = path.join(fresh('f'), name);
  writeFileSync(f, content);
  return f;
};

/** A FIFO (named pipe) nobody writes to: a plain read of it waits forever. */
export const fifo = (name: string) => {
  const f = path.join(fresh('fifo'), name);
  execFileSync('mkfifo', [f]);
  return f;
};

/** A model folder whose config.json says `config` (only what the config checks read). */
export const modelDir = (config: Record<string, unknown>) => {
  const d = fresh('model');
  writeFileSync(path.join(d, 'config.json'), JSON.stringify(config));
  return d;
};

/** Every file under dir with its bytes' hash: equal snapshots mean nothing was lost or overwritten. */
export function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const r = path.join(rel, e.name);
      if (e.isDirectory()) walk(r);
      else
        out[r] = createHash('sha256')
          .update(readFileSync(path.join(dir, r)))
          .digest('hex');
    }
  };
  if (existsSync(dir)) walk('');
  return out;
}

export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** A plain TCP listener standing for "another server" on a port. */
export async function occupy(): Promise<{ port: number; close(): Promise<void> }> {
  const s = net.createServer((c) => c.destroy());
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { port: (s.address() as net.AddressInfo).port, close: () => new Promise((r) => s.close(() => r())) };
}
