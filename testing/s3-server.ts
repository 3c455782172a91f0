// A real S3-compatible server for tests and local use: S3Proxy (gaul/s3proxy) with its filesystem
// backend, one Java process. Installed once into the cache directory (the jar from Maven Central,
// checked against Maven's .sha1, downloaded under a temporary name and renamed into place), started
// on a free loopback port with a data directory and credentials, stopped by killing its process group.
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, promises as fs, readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cacheDir } from '../base/paths.js';
import type { S3Client } from '@aws-sdk/client-s3';
import { freePort, isAlive, processIsZombie, spawnDetached, stopProcess } from '../supervise/process.js';

export const S3PROXY_VERSION = '4.1.0';
/** S3Proxy 4.x is compiled for Java 17 (class file 61). */
export const S3PROXY_MIN_JAVA = 17;
const MAVEN_BASE = 'https://repo1.maven.org/maven2';

/** The server cannot be installed or run here (no network, no Java): tests skip with this message. */
export class S3ServerUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'S3ServerUnavailable';
  }
}

export function s3proxyJarUrl(version = S3PROXY_VERSION, env: NodeJS.ProcessEnv = process.env): string {
  const base = (env.TEMPO_RL_MAVEN_URL || MAVEN_BASE).replace(/\/+$/, '');
  return `${base}/org/gaul/s3proxy/${version}/s3proxy-${version}-jar-with-dependencies.jar`;
}

/** Where the jar lives once installed: `<cache>/s3proxy/<version>/s3proxy-<version>.jar`. */
export function s3proxyJarPath(version = S3PROXY_VERSION, env: NodeJS.ProcessEnv = process.env): string {
  return path.join(cacheDir(env), 's3proxy', version, `s3proxy-${version}.jar`);
}

export interface S3ProxyInstall {
  jar: string;
  version: string;
  /** Whether this call downloaded the jar (false: it was already installed). */
  downloaded: boolean;
  /** Milliseconds this call spent installing (download and check; ~0 when already installed). */
  ms: number;
}

async function fetchOrExplain(url: string, timeoutMs: number): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new S3ServerUnavailable(`cannot download ${url}: ${cause?.code ?? cause?.message ?? (err as Error).message}`);
  }
  if (!res.ok) throw new S3ServerUnavailable(`cannot download ${url}: HTTP ${res.status} ${res.statusText}`);
  return res;
}

/**
 * Installs the S3Proxy jar into the cache, idempotently: a jar under its final name was checked
 * against Maven's SHA-1 before it was renamed there, so its presence means installed. Concurrent
 * installers each download to their own temporary name; the last rename wins with identical bytes.
 */
export async function installS3Proxy(
  opts: { version?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<S3ProxyInstall> {
  const version = opts.version ?? S3PROXY_VERSION;
  const env = opts.env ?? process.env;
  const jar = s3proxyJarPath(version, env);
  const t0 = Date.now();
  if (existsSync(jar)) return { jar, version, downloaded: false, ms: Date.now() - t0 };
  const url = s3proxyJarUrl(version, env);
  const timeoutMs = opts.timeoutMs ?? 300_000;
  const expected =
    (await (await fetchOrExplain(`${url}.sha1`, 30_000)).text()).trim().split(/\s+/)[0]?.toLowerCase() ?? '';
  if (!/^[0-9a-f]{40}$/.test(expected))
    throw new S3ServerUnavailable(`${url}.sha1 does not hold a SHA-1: ${JSON.stringify(expected.slice(0, 80))}`);
  await fs.mkdir(path.dirname(jar), { recursive: true });
  const tmp = `${jar}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    const res = await fetchOrExplain(url, timeoutMs);
    if (!res.body) throw new S3ServerUnavailable(`cannot download ${url}: empty response`);
    const sha1 = createHash('sha1');
    const out = createWriteStream(tmp, { flags: 'wx' });
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        sha1.update(chunk);
        if (!out.write(chunk)) await new Promise<void>((resolve) => out.once('drain', resolve));
      }
    } catch (err) {
      throw new S3ServerUnavailable(`download of ${url} broke off: ${(err as Error).message}`);
    } finally {
      await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
    }
    const got = sha1.digest('hex');
    if (got !== expected) throw new Error(`${url}: SHA-1 ${got} does not match Maven's ${expected}; nothing installed`);
    await fs.rename(tmp, jar);
  } finally {
    await fs.rm(tmp, { force: true });
  }
  await fs.writeFile(`${jar}.sha1`, `${expected}\n`);
  return { jar, version, downloaded: true, ms: Date.now() - t0 };
}

/** The Java major version of a `java` binary (null when it does not run). */
export function javaMajor(java: string): number | null {
  const r = spawnSync(java, ['-version'], { encoding: 'utf8', timeout: 30_000 });
  if (r.error || r.status !== 0) return null;
  const m = /version "(\d+)(?:\.(\d+))?/.exec(`${r.stderr}${r.stdout}`);
  if (!m) return null;
  const major = Number(m[1]);
  return major === 1 ? Number(m[2]) : major; // "1.8.0_x" is Java 8
}

/**
 * A Java able to run S3Proxy: $TEMPO_RL_JAVA, else $JAVA_HOME/bin/java, else `java` on the PATH,
 * else the newest JDK under /usr/lib/jvm — the first of at least version 17.
 */
export function findJava(env: NodeJS.ProcessEnv = process.env): { java: string; major: number } {
  const candidates: string[] = [];
  if (env.TEMPO_RL_JAVA) candidates.push(env.TEMPO_RL_JAVA);
  if (env.JAVA_HOME) candidates.push(path.join(env.JAVA_HOME, 'bin', 'java'));
  candidates.push('java');
  try {
    for (const d of readdirSync('/usr/lib/jvm').sort().reverse())
      candidates.push(path.join('/usr/lib/jvm', d, 'bin', 'java'));
  } catch {
    /* no /usr/lib/jvm */
  }
  const seen: string[] = [];
  for (const java of candidates) {
    const major = javaMajor(java);
    if (major !== null && major >= S3PROXY_MIN_JAVA) return { java, major };
    seen.push(major === null ? `${java} (does not run)` : `${java} (Java ${major})`);
  }
  throw new S3ServerUnavailable(
    `no Java ${S3PROXY_MIN_JAVA}+ to run S3Proxy (set TEMPO_RL_JAVA or JAVA_HOME); tried: ${seen.join(', ')}`,
  );
}

export interface S3ServerOptions {
  /** The filesystem backend's base directory: one subdirectory per bucket. Created if missing. */
  dataDir: string;
  accessKey?: string;
  secretKey?: string;
  region?: string;
  /** Buckets to create once the server is up. */
  buckets?: string[];
  version?: string;
  env?: NodeJS.ProcessEnv;
  startTimeoutMs?: number;
}

export interface S3Server {
  endpoint: string;
  port: number;
  /** The Java process, leader of the server's process group (with its watchdog loop). */
  pid: number;
  accessKey: string;
  secretKey: string;
  region: string;
  dataDir: string;
  log: string;
  version: string;
  java: string;
  javaMajor: number;
  install: S3ProxyInstall;
  /** Milliseconds from spawn to healthy. */
  startMs: number;
  /** The standard AWS variables that point a client (SDK, CLI, boto3, tempo-rl's S3BlobStore) here. */
  awsEnv(): Record<string, string>;
  /** Kills the server's process group and waits until it is gone; idempotent. */
  stop(): Promise<void>;
}

/** A process exit without stop() still takes the servers this process started down with it. */
const running = new Set<number>();
let exitHookInstalled = false;
function killOnExit(pid: number): void {
  running.add(pid);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const p of running) {
      try {
        process.kill(-p, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  });
}

/** Live processes of a process group (not zombies: every thread exited), from /proc. */
export function processGroupMembers(pgid: number): number[] {
  const out: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    try {
      // pid (comm) state ppid pgrp …; comm may hold spaces and parentheses: split after the last ')'
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[2]) === pgid && !processIsZombie(Number(e))) out.push(Number(e));
    } catch {
      /* gone */
    }
  }
  return out;
}

function logTail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

async function signedClient(endpoint: string, region: string, accessKey: string, secretKey: string): Promise<S3Client> {
  const { S3Client } = await import('@aws-sdk/client-s3');
  return new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: accessKey, secretAccessKey: secretKey },
  });
}

/** Healthy: a request signed with this server's own random credentials succeeds, so the answer
 *  comes from our server (not another process that took the port in between). */
async function answersSigned(client: S3Client): Promise<boolean> {
  const { ListBucketsCommand } = await import('@aws-sdk/client-s3');
  try {
    await client.send(new ListBucketsCommand({}), { abortSignal: AbortSignal.timeout(5_000) });
    return true;
  } catch {
    return false;
  }
}

async function createBuckets(client: S3Client, buckets: string[]): Promise<void> {
  const { CreateBucketCommand } = await import('@aws-sdk/client-s3');
  for (const Bucket of buckets) {
    try {
      await client.send(new CreateBucketCommand({ Bucket }));
    } catch (err) {
      if ((err as { name?: string }).name !== 'BucketAlreadyOwnedByYou') throw err;
    }
  }
}

/**
 * A watchdog beside the server, in its process group: the shell forks a loop, then execs Java (so the
 * group leader's pid is Java's). Once the Node process that started it is gone, even by SIGKILL
 * where no exit hook runs, the loop stops the whole group (TERM, then KILL after 5 s); once Java
 * itself is gone, the loop just ends.
 */
const WATCHDOG = [
  '( while kill -0 "$TEMPO_RL_S3_PARENT" 2>/dev/null && kill -0 $$ 2>/dev/null; do sleep 1; done',
  '  kill -0 $$ 2>/dev/null || exit 0',
  "  trap '' TERM; kill -TERM 0 2>/dev/null; sleep 5; kill -KILL 0 2>/dev/null ) &",
  'exec "$0" "$@"',
].join('\n');

/**
 * Installs (if needed) and starts S3Proxy on a free loopback port, serving `dataDir` with the given
 * credentials (SigV2 or SigV4); resolves once it answers a request signed with them. Throws
 * S3ServerUnavailable where the jar cannot be had or no Java runs it.
 */
export async function startS3Server(opts: S3ServerOptions): Promise<S3Server> {
  const env = opts.env ?? process.env;
  const version = opts.version ?? S3PROXY_VERSION;
  const install = await installS3Proxy({ version, env });
  const { java, major } = findJava(env);
  const dataDir = path.resolve(opts.dataDir);
  await fs.mkdir(dataDir, { recursive: true });
  const accessKey = opts.accessKey ?? `tempo-${randomBytes(6).toString('hex')}`;
  const secretKey = opts.secretKey ?? randomBytes(24).toString('base64url');
  const region = opts.region ?? 'us-east-1';
  // The properties (with the secret) and the log live beside, not inside, the data directory:
  // every directory inside it is a bucket.
  const confDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tempo-rl-s3proxy-'));
  const log = path.join(confDir, 's3proxy.log');
  let lastError = '';
  // A free port can be taken between the probe and the bind: try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const endpoint = `http://127.0.0.1:${port}`;
    const props = path.join(confDir, 's3proxy.properties');
    const lines = [
      `s3proxy.endpoint=${endpoint}`,
      's3proxy.authorization=aws-v2-or-v4',
      `s3proxy.identity=${accessKey}`,
      `s3proxy.credential=${secretKey}`,
      'jclouds.provider=filesystem',
      `jclouds.filesystem.basedir=${dataDir}`,
      '',
    ];
    await fs.writeFile(props, lines.join('\n'), { mode: 0o600 });
    // A small JVM: C1 only and a serial GC start faster and take less CPU on a shared machine.
    const args = [
      '-Xmx256m',
      '-XX:+UseSerialGC',
      '-XX:TieredStopAtLevel=1',
      '-jar',
      install.jar,
      '--properties',
      props,
    ];
    const t0 = Date.now();
    const childEnv = {
      ...env,
      LOG_LEVEL: env.S3PROXY_LOG_LEVEL || 'warn',
      JETTY_LOG_LEVEL: 'warn',
      TEMPO_RL_S3_PARENT: String(process.pid),
    };
    const { pid } = spawnDetached('/bin/sh', ['-c', WATCHDOG, java, ...args], { log, env: childEnv });
    killOnExit(pid);
    const client = await signedClient(endpoint, region, accessKey, secretKey);
    const deadline = t0 + (opts.startTimeoutMs ?? 60_000);
    let healthy = false;
    while (Date.now() < deadline && isAlive(pid)) {
      if (await answersSigned(client)) {
        healthy = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!healthy) {
      client.destroy();
      const alive = isAlive(pid);
      await stopProcess(pid, 1_000);
      running.delete(pid);
      lastError = alive ? `not healthy after ${Math.round((Date.now() - t0) / 1000)}s` : 'exited at start';
      if (alive) break; // a hung start is not a port race
      continue;
    }
    const startMs = Date.now() - t0;
    let stopped: Promise<void> | null = null;
    const server: S3Server = {
      endpoint,
      port,
      pid,
      accessKey,
      secretKey,
      region,
      dataDir,
      log,
      version,
      java,
      javaMajor: major,
      install,
      startMs,
      awsEnv: () => ({
        AWS_ACCESS_KEY_ID: accessKey,
        AWS_SECRET_ACCESS_KEY: secretKey,
        AWS_REGION: region,
        AWS_ENDPOINT_URL_S3: endpoint,
      }),
      stop: () =>
        (stopped ??= (async () => {
          await stopProcess(pid, 5_000);
          // The watchdog loop and its sleep share the group: gone with it, or killed now.
          for (let i = 0; i < 40 && processGroupMembers(pid).length; i++) await new Promise((r) => setTimeout(r, 50));
          if (processGroupMembers(pid).length) {
            try {
              process.kill(-pid, 'SIGKILL');
            } catch {
              /* gone */
            }
          }
          running.delete(pid);
          await fs.rm(confDir, { recursive: true, force: true });
        })()),
    };
    try {
      await createBuckets(client, opts.buckets ?? []);
    } catch (err) {
      await server.stop();
      throw err;
    } finally {
      client.destroy();
    }
    return server;
  }
  const tail = logTail(log);
  await fs.rm(confDir, { recursive: true, force: true });
  throw new Error(`S3Proxy ${version} (${java}, Java ${major}) did not start: ${lastError}${tail ? `\n${tail}` : ''}`);
}
