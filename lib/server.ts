// The embedded Temporal dev server: `temporal server start-dev` with a SQLite file in the state
// directory, so a restart (or a SIGKILL) loses nothing.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { TempoConfig } from '../config/schema.js';
import { childLogger } from './log.js';
import { stateLayout, temporalBin } from './paths.js';
import { commandLine, isAlive, portOpen, spawnDetached, stopProcess, waitFor } from './process.js';

const log = childLogger('server');

export const SEARCH_ATTRIBUTES = { TempoRlStatus: 'Keyword', TempoRlStep: 'Int' } as const;

export interface ServerStatus {
  running: boolean;
  address: string;
  ui: string;
  db: string;
  pid: number | null;
  external: boolean;
}

interface ServerRecord {
  pid: number;
  address: string;
  ui: string;
  db: string;
}

function readRecord(file: string): ServerRecord | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as ServerRecord;
  } catch {
    return null;
  }
}

function ours(rec: ServerRecord | null): rec is ServerRecord {
  return !!rec && isAlive(rec.pid) && commandLine(rec.pid).includes('start-dev');
}

export async function serverStatus(cfg: TempoConfig): Promise<ServerStatus> {
  const paths = stateLayout(cfg.state_dir);
  if (cfg.temporal.address) {
    const [host, port] = cfg.temporal.address.split(':');
    const running = await portOpen(host ?? '127.0.0.1', Number(port ?? 7233));
    return { running, address: cfg.temporal.address, ui: '', db: '', pid: null, external: true };
  }
  const rec = readRecord(paths.serverRecord);
  const address = `${cfg.server.ip}:${cfg.server.port}`;
  const running = ours(rec) && (await portOpen(cfg.server.ip, cfg.server.port));
  return {
    running,
    address,
    ui: `http://${cfg.server.ip}:${cfg.server.ui_port}`,
    db: paths.temporalDb,
    pid: running ? rec!.pid : null,
    external: false,
  };
}

/** Starts the dev server unless one of ours is already running. Returns whether it started one. */
export async function startServer(cfg: TempoConfig): Promise<{ started: boolean; status: ServerStatus }> {
  const before = await serverStatus(cfg);
  if (before.external) {
    log.info({ address: before.address }, 'TEMPORAL_ADDRESS is set: using that server, starting nothing');
    return { started: false, status: before };
  }
  if (before.running) return { started: false, status: before };
  if (await portOpen(cfg.server.ip, cfg.server.port))
    throw new Error(`port ${cfg.server.port} is taken by a process tempo-rl did not start; set server.port or TEMPORAL_ADDRESS`);
  const paths = stateLayout(cfg.state_dir);
  mkdirSync(paths.server, { recursive: true });
  const bin = temporalBin();
  if (!existsSync(bin)) throw new Error(`temporal binary not found at ${bin}: run scripts/bootstrap.sh (bin/tempo-rl does)`);
  const args = [
    'server', 'start-dev',
    '--ip', cfg.server.ip,
    '--port', String(cfg.server.port),
    '--ui-port', String(cfg.server.ui_port),
    '--db-filename', paths.temporalDb,
    '--namespace', cfg.temporal.namespace,
    '--log-level', 'warn',
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([k, v]) => ['--search-attribute', `${k}=${v}`]),
  ];
  const { pid } = spawnDetached(bin, args, { log: paths.serverLog });
  const rec: ServerRecord = { pid, address: before.address, ui: before.ui, db: paths.temporalDb };
  writeFileSync(paths.serverRecord, JSON.stringify(rec));
  try {
    await waitFor(async () => !isAlive(pid) || (await portOpen(cfg.server.ip, cfg.server.port)), 'the Temporal server', 60_000);
  } catch (err) {
    await stopProcess(pid, 1000);
    throw err;
  }
  if (!isAlive(pid)) throw new Error(`the Temporal server exited at start; see ${paths.serverLog}`);
  log.info({ address: rec.address, ui: rec.ui, db: rec.db }, 'Temporal server started');
  return { started: true, status: await serverStatus(cfg) };
}

/** Stops only the process this state directory recorded. */
export async function stopServer(cfg: TempoConfig): Promise<boolean> {
  const paths = stateLayout(cfg.state_dir);
  const rec = readRecord(paths.serverRecord);
  if (!ours(rec)) {
    rmSync(paths.serverRecord, { force: true });
    return false;
  }
  await stopProcess(rec.pid);
  rmSync(paths.serverRecord, { force: true });
  return true;
}
