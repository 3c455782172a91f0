// The embedded Temporal dev server: `temporal server start-dev` with a SQLite file in the state
// directory, so a restart (or a SIGKILL) loses nothing.
import { existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import type { TempoConfig } from '../config/schema.js';
import { childLogger } from '../base/log.js';
import { temporalBin } from '../base/paths.js';
import { stateLayout } from '../stores/layout.js';
import { commandLine, isAlive, portOpen, spawnDetached, stopProcess, waitFor } from './process.js';
import { readJsonRecord } from '../base/bounded-file.js';

const log = childLogger('server');

export const SEARCH_ATTRIBUTES = { TempoRlStatus: 'Keyword', TempoRlStep: 'Int' } as const;

/** The embedded server's dynamic config. Eager activities: the generate activity a workflow task
 *  schedules comes back in the answer to that task's completion, to the same worker process, instead
 *  of through the task queue (no matching round trip, and an episode's turns stay with the process
 *  whose engine router has seen its prefix; docs/benchmarks.md "512 episodes in flight"). */
export const DYNAMIC_CONFIG = { 'system.enableActivityEagerExecution': true } as const;

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
  /** Asked for by `tempo-rl server start` (as it started it, or found it running): only
   *  `tempo-rl server stop` stops it, never a command that started it for its own look-ups. */
  kept?: boolean;
}

function readRecord(file: string): ServerRecord | null {
  try {
    return readJsonRecord(file) as ServerRecord;
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

/**
 * Whether process `pid` holds a listening TCP socket on `port` (Linux /proc; null where /proc
 * cannot tell). A port that answers may belong to another server: that one is not ours.
 */
export function listensOn(pid: number, port: number): boolean | null {
  const inodes = new Set<string>();
  try {
    for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
      if (!existsSync(table)) continue;
      for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
        const f = line.trim().split(/\s+/);
        // local_address is HEXIP:HEXPORT, st 0A is LISTEN, field 9 the socket inode
        if (f.length > 9 && f[3] === '0A' && parseInt(f[1]!.split(':')[1]!, 16) === port) inodes.add(f[9]!);
      }
    }
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkOr(`/proc/${pid}/fd/${fd}`));
      if (m && inodes.has(m[1]!)) return true;
    }
    return false;
  } catch {
    return null;
  }
}

function readlinkOr(p: string): string {
  try {
    return readlinkSync(p);
  } catch {
    return '';
  }
}

/** The recorded server, settled before its port is judged another process's (null: none to use).
 *  - Ours (alive, our command) but its port did not answer the status check: still starting, or the
 *    check lost a race (a connect's answer waits behind its 1 s timer when the event loop was held up,
 *    as on 2 busy cores). Waited for (up to 60 s) and returned when it answers.
 *  - Alive but no longer ours: one SIGKILLed a moment ago. The kernel frees a dying process's memory,
 *    and its command line with it, before it closes its sockets, so for that moment its ports still
 *    answer: waited for to exit (up to 10 s). */
async function settleRecordedServer(cfg: TempoConfig, recordFile: string): Promise<ServerStatus | null> {
  const rec = readRecord(recordFile);
  if (!rec || !isAlive(rec.pid)) return null;
  const pid = rec.pid;
  if (!ours(rec)) {
    await waitFor(async () => !isAlive(pid), 'the killed Temporal server to exit', 10_000, 50).catch(() => undefined);
    return null;
  }
  const answers = async () =>
    (await portOpen(cfg.server.ip, cfg.server.port)) && listensOn(pid, cfg.server.port) !== false;
  await waitFor(async () => !isAlive(pid) || (await answers()), `our Temporal server (pid ${pid}) to answer`, 60_000);
  const status = await serverStatus(cfg);
  return status.running ? status : null;
}

/** Starts the dev server unless one of ours is already running. Returns whether it started one.
 *  `keep`: `tempo-rl server start`'s, marks the server (started or found) as the user's. */
export async function startServer(
  cfg: TempoConfig,
  opts: { keep?: boolean } = {},
): Promise<{ started: boolean; status: ServerStatus }> {
  const before = await serverStatus(cfg);
  if (before.external) {
    log.info({ address: before.address }, 'TEMPORAL_ADDRESS is set: using that server, starting nothing');
    return { started: false, status: before };
  }
  if (before.running) {
    if (opts.keep) keepRecord(cfg);
    return { started: false, status: before };
  }
  const paths = stateLayout(cfg.state_dir);
  const found = await settleRecordedServer(cfg, paths.serverRecord);
  if (found) {
    if (opts.keep) keepRecord(cfg);
    return { started: false, status: found };
  }
  if (await portOpen(cfg.server.ip, cfg.server.port))
    throw new Error(
      `server.port ${cfg.server.port} is taken by a process tempo-rl did not start; set server.port or TEMPORAL_ADDRESS`,
    );
  if (await portOpen(cfg.server.ip, cfg.server.ui_port))
    throw new Error(`server.ui_port ${cfg.server.ui_port} is taken by another process; set server.ui_port`);
  mkdirSync(paths.server, { recursive: true });
  const bin = temporalBin();
  if (!existsSync(bin))
    throw new Error(`temporal binary not found at ${bin}: run scripts/bootstrap.sh (bin/tempo-rl does)`);
  const args = [
    'server',
    'start-dev',
    '--ip',
    cfg.server.ip,
    '--port',
    String(cfg.server.port),
    '--ui-port',
    String(cfg.server.ui_port),
    '--db-filename',
    paths.temporalDb,
    '--namespace',
    cfg.temporal.namespace,
    '--log-level',
    'warn',
    // WAL with synchronous=NORMAL: a commit survives a SIGKILL of any process (what the crash tests
    // do); only an OS crash or power loss can take the last ones. Cuts each workflow task's latency.
    '--sqlite-pragma',
    'journal_mode=wal',
    '--sqlite-pragma',
    'synchronous=normal',
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([k, v]) => ['--search-attribute', `${k}=${v}`]),
    ...Object.entries(DYNAMIC_CONFIG).flatMap(([k, v]) => ['--dynamic-config-value', `${k}=${JSON.stringify(v)}`]),
  ];
  const { pid } = spawnDetached(bin, args, { log: paths.serverLog });
  const rec: ServerRecord = {
    pid,
    address: before.address,
    ui: before.ui,
    db: paths.temporalDb,
    ...(opts.keep ? { kept: true } : {}),
  };
  writeFileSync(paths.serverRecord, JSON.stringify(rec));
  // Ready when our process listens on both ports; a port that answers for another process (a
  // server started meanwhile) is not ours, and ours then dies at bind.
  const ready = async () =>
    (await portOpen(cfg.server.ip, cfg.server.port)) && (await portOpen(cfg.server.ip, cfg.server.ui_port));
  try {
    await waitFor(
      async () => !isAlive(pid) || ((await ready()) && listensOn(pid, cfg.server.port) !== false),
      'the Temporal server',
      60_000,
    );
  } catch (err) {
    await stopProcess(pid, 1000);
    rmSync(paths.serverRecord, { force: true });
    throw err;
  }
  if (!isAlive(pid)) {
    rmSync(paths.serverRecord, { force: true });
    throw new Error(
      `the Temporal server exited at start (ports ${cfg.server.port}, ${cfg.server.ui_port}); see ${paths.serverLog}`,
    );
  }
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

function keepRecord(cfg: TempoConfig): void {
  const file = stateLayout(cfg.state_dir).serverRecord;
  const rec = readRecord(file);
  if (rec && !rec.kept) writeFileSync(file, JSON.stringify({ ...rec, kept: true }));
}

/**
 * Processes other than `exclude` with a TCP connection to `port` on this machine (Linux /proc; null
 * where /proc cannot tell): the clients of a server listening there.
 */
export function otherClients(port: number, exclude: number[]): number | null {
  try {
    const sockets = new Set<string>();
    for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
      if (!existsSync(table)) continue;
      for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
        const f = line.trim().split(/\s+/);
        // rem_address is HEXIP:HEXPORT, st 01 is ESTABLISHED, field 9 the socket inode
        if (f.length > 9 && f[3] === '01' && parseInt(f[2]!.split(':')[1]!, 16) === port) sockets.add(f[9]!);
      }
    }
    for (const pid of exclude)
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkOr(`/proc/${pid}/fd/${fd}`));
        if (m) sockets.delete(m[1]!);
      }
    return sockets.size;
  } catch {
    return null;
  }
}

/**
 * Stops the server a command started for its own look-ups (`pid`, from its startServer), when it is
 * still that server, no one asked to keep it (`tempo-rl server start`), and no other process is
 * connected to it (a `train` run's workers, another command). Returns why it was left running.
 */
export async function stopServerIfUnused(cfg: TempoConfig, pid: number): Promise<{ stopped: boolean; why: string }> {
  const rec = readRecord(stateLayout(cfg.state_dir).serverRecord);
  if (!ours(rec) || rec.pid !== pid) return { stopped: false, why: 'the server running now is not the one it started' };
  if (rec.kept) return { stopped: false, why: 'tempo-rl server start asked for it' };
  const clients = otherClients(cfg.server.port, [process.pid, pid]);
  if (clients === null) return { stopped: false, why: 'cannot tell whether another process uses it' };
  if (clients > 0) return { stopped: false, why: `${clients} connection(s) of other processes use it` };
  return { stopped: await stopServer(cfg), why: 'no one else uses it' };
}
