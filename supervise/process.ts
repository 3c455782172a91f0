// Background processes that tempo-rl starts (Temporal dev server, vLLM engines, workers): started
// detached in their own process group, recorded by pid, and stopped only if still ours.
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export interface Spawned {
  pid: number;
  log: string;
}

export function spawnDetached(
  cmd: string,
  args: string[],
  opts: { log: string; env?: NodeJS.ProcessEnv; cwd?: string },
): Spawned {
  mkdirSync(path.dirname(opts.log), { recursive: true });
  const out = openSync(opts.log, 'a');
  const child = spawn(cmd, args, {
    detached: true,
    stdio: ['ignore', out, out],
    env: opts.env ?? process.env,
    cwd: opts.cwd,
  });
  if (child.pid === undefined) throw new Error(`could not start ${cmd}`);
  child.unref();
  return { pid: child.pid, log: opts.log };
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !processIsZombie(pid);
  } catch {
    return false;
  }
}

/** Every thread of `pid` has exited. Not the leader's state alone: a SIGKILLed multi-threaded
 *  process (the Temporal server) shows its leader as a zombie at once, while its other threads still
 *  run their exit holding the process's files, its listening sockets among them. */
export function processIsZombie(pid: number): boolean {
  let threads: string[];
  try {
    threads = readdirSync(`/proc/${pid}/task`);
  } catch {
    return false;
  }
  return threads.every((tid) => {
    try {
      return /\) Z /.test(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8'));
    } catch {
      return true; // that thread is gone
    }
  });
}

/** The command line of a pid ('' when gone); used to check a recorded pid is still ours. */
export function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch {
    return '';
  }
}

export function portOpen(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port });
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    // A timer that expired while the event loop was held up (2 busy cores) runs before the poll that
    // would deliver the connect's answer: one turn more (setImmediate runs after that poll) lets a
    // connect that did succeed say so, instead of a listening port reading as closed.
    sock.setTimeout(timeoutMs, () => setImmediate(() => done(false)));
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}

export async function waitFor(
  check: () => Promise<boolean>,
  what: string,
  timeoutMs: number,
  intervalMs = 250,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${Math.round(timeoutMs / 1000)}s waiting for ${what}`);
}

/** SIGTERM the process group, then SIGKILL after a grace period. */
export async function stopProcess(pid: number, graceMs = 10_000): Promise<void> {
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig);
    } catch {
      try {
        process.kill(pid, sig);
      } catch {
        /* already gone */
      }
    }
  };
  signal('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (!isAlive(pid)) return;
  signal('SIGKILL');
  // A SIGKILLed process is not gone the instant kill() returns: callers count on "stopped" meaning gone.
  const killDeadline = Date.now() + 5_000;
  while (isAlive(pid) && Date.now() < killDeadline) await new Promise((r) => setTimeout(r, 50));
}

/** A free loopback port, for tests. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/** Where the kernel takes the local ports of outgoing connections from (Linux; elsewhere 32768 and up
 *  covers the usual ranges). */
export function ephemeralPortsFrom(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 0) return low;
  } catch {
    // no procfs: the default below
  }
  return 32768;
}

const TEST_PORTS_FROM = 10000;

function listenOn(srv: net.Server, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => resolve(true));
  });
}

/** `n` distinct free loopback ports, for tests: each stays bound until all are found (two ports asked
 *  for one after the other can be the same, the first freed before the second is bound). They are drawn
 *  below the kernel's ephemeral range: a server a test kills and starts again on its port must find it
 *  free, and a port of that range can meanwhile become the local end of any outgoing connection. */
export async function freePorts(n: number): Promise<number[]> {
  const below = ephemeralPortsFrom();
  const span = below - TEST_PORTS_FROM;
  const servers: net.Server[] = [];
  try {
    for (let i = 0; i < n; i++) {
      let bound = false;
      for (let attempt = 0; !bound && attempt < 200; attempt++) {
        const srv = net.createServer();
        // With no room below the range, the kernel's choice (port 0).
        const port = span >= 1000 ? TEST_PORTS_FROM + Math.floor(Math.random() * span) : 0;
        bound = await listenOn(srv, port);
        if (bound) servers.push(srv);
      }
      if (!bound) throw new Error(`no free loopback port in ${TEST_PORTS_FROM}-${below - 1} after 200 tries`);
    }
    return servers.map((srv) => (srv.address() as net.AddressInfo).port);
  } finally {
    await Promise.all(servers.map((srv) => new Promise((r) => srv.close(r))));
  }
}
