// The embedded Temporal server: start/stop/status, no-op start, and durability across SIGKILL.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { pythonBin, REPO_ROOT } from '../../base/paths.js';
import { freePorts, isAlive, waitFor } from '../../supervise/process.js';
import { serverStatus, startServer, stopServer } from '../../supervise/server.js';
import { stateLayout } from '../../stores/layout.js';
import { connectClient } from '../../supervise/temporal.js';
import { waitForMarker } from '../../testing/workflows/wait-for-marker.js';
import { startRolloutWorker, startTestServer } from '../../testing/temporal.js';

const server = await startTestServer();
after(() => server.stop());
const cfg = server.cfg;

test('status --json reports the running server; start again is a no-op', () => {
  const bin = path.join(REPO_ROOT, 'bin', 'tempo-rl');
  const sets = [
    '--set',
    `state_dir=${cfg.state_dir}`,
    '--set',
    `server.port=${cfg.server.port}`,
    '--set',
    `server.ui_port=${cfg.server.ui_port}`,
  ];
  const env = { ...process.env, TEMPORAL_ADDRESS: '' };
  const status = JSON.parse(execFileSync(bin, [...sets, 'server', 'status', '--json'], { encoding: 'utf8', env }));
  assert.deepEqual(Object.keys(status).sort(), ['address', 'db', 'running', 'ui']);
  assert.equal(status.running, true);
  assert.equal(status.address, `127.0.0.1:${cfg.server.port}`);
  assert.match(status.db, /temporal\.sqlite$/);
  // journal_mode=wal took: the server writes its commits to the write-ahead log beside the file
  assert.ok(existsSync(`${status.db}-wal`), `${status.db}-wal`);
  const again = execFileSync(bin, [...sets, 'server', 'start'], { encoding: 'utf8', env });
  assert.match(again, /already running/);
});

test('TEMPORAL_ADDRESS elsewhere: the CLI uses it and starts nothing', async () => {
  const ext = { ...cfg, temporal: { ...cfg.temporal, address: `127.0.0.1:${cfg.server.port}` } };
  const { started, status } = await startServer(ext);
  assert.equal(started, false);
  assert.equal(status.external, true);
});

test('a workflow survives SIGKILL of the Temporal server with its history intact', async () => {
  const worker = await startRolloutWorker(cfg);
  const clients: Awaited<ReturnType<typeof connectClient>>[] = [];
  try {
    const client = await connectClient(cfg);
    clients.push(client);
    const marker = path.join(mkdtempSync(path.join(os.tmpdir(), 'marker-')), 'go');
    writeFileSync(`${marker}.first`, 'one');
    const handle = await client.workflow.start(waitForMarker, {
      taskQueue: cfg.temporal.task_queues.rollout,
      workflowId: `durability-${Date.now()}`,
      args: [{ marker }],
    });
    // Wait until the first activity completed and the second is in flight.
    for (;;) {
      const hist = await handle.fetchHistory();
      const done = hist.events?.filter((e) => e.activityTaskCompletedEventAttributes).length ?? 0;
      if (done >= 1) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const before = await serverStatus(cfg);
    assert.ok(before.pid);
    process.kill(before.pid!, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await serverStatus(cfg)).running, false);
    await startServer(cfg);
    writeFileSync(marker, 'two');
    const client2 = await connectClient(cfg);
    clients.push(client2);
    const result = await client2.workflow.getHandle(handle.workflowId).result();
    assert.deepEqual(result, { before: 'first:one', after: 'second:two' });
    const hist = await client2.workflow.getHandle(handle.workflowId).fetchHistory();
    const scheduled = hist.events?.filter((e) => e.activityTaskScheduledEventAttributes).length;
    assert.equal(scheduled, 2, 'each activity scheduled exactly once across the crash');
  } finally {
    await worker.stop();
    // open connections keep the test process alive after its last test
    await Promise.all(clients.map((c) => c.connection.close()));
  }
});

const ownDirs: string[] = [];
after(() => ownDirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** A config of its own: a fresh state dir (removed after the file) and free ports, no server started. */
async function ownState(prefix: string): Promise<typeof cfg> {
  const [port, ui] = (await freePorts(2)) as [number, number];
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  ownDirs.push(dir);
  return { ...cfg, state_dir: dir, server: { ...cfg.server, port, ui_port: ui } };
}

/** Process `pid` written into the state dir's server record, as startServer writes its server's. */
function recordAsServer(mine: typeof cfg, pid: number): void {
  const record = stateLayout(mine.state_dir).serverRecord;
  mkdirSync(path.dirname(record), { recursive: true });
  writeFileSync(record, JSON.stringify({ pid, address: `127.0.0.1:${mine.server.port}`, ui: '', db: '' }));
}

test('a recorded server that is still closing its port after a SIGKILL is waited for, not taken for a stranger', async () => {
  // A dying process no longer reads as the server (its command line goes first) while its port still
  // answers: here a process that holds the port and exits 1.5 s later, in the server's record.
  const mine = await ownState('tempo-rl-dying-');
  const port = mine.server.port;
  const holder = spawn(process.execPath, [
    '-e',
    `require('net').createServer().listen(${port}, '127.0.0.1', () => console.log('up')); setTimeout(() => process.exit(0), 1500)`,
  ]);
  await new Promise((r) => holder.stdout.once('data', r));
  recordAsServer(mine, holder.pid!);
  try {
    const { started, status } = await startServer(mine);
    assert.equal(started, true);
    assert.equal(status.running, true);
  } finally {
    holder.kill('SIGKILL');
    await stopServer(mine);
  }
});

test('a SIGKILLed server whose leader thread is gone while another still holds its port is waited for', async () => {
  // A multi-threaded process's leader reads as a zombie the moment it exits, while its other threads
  // still run their exit holding its sockets (the Temporal server after a SIGKILL, for a moment that
  // grows on busy cores). Here a Python process whose leader thread exits at once and whose other
  // thread holds the port for 1.5 s more.
  const mine = await ownState('tempo-rl-leaderless-');
  const holder = spawn(
    pythonBin(),
    [
      '-c',
      [
        'import ctypes, os, socket, threading, time',
        'srv = socket.create_server(("127.0.0.1", int(os.environ["PORT"])))',
        'threading.Thread(target=lambda: (time.sleep(1.5), os._exit(0))).start()',
        'print("up", flush=True)',
        'ctypes.CDLL(None).pthread_exit(None)',
      ].join('\n'),
    ],
    { env: { ...process.env, PORT: String(mine.server.port) } },
  );
  await new Promise((r) => holder.stdout.once('data', r));
  await waitFor(
    async () => /\) Z /.test(readFileSync(`/proc/${holder.pid}/stat`, 'utf8')),
    'the leader thread to exit',
    5_000,
    20,
  );
  assert.equal(isAlive(holder.pid!), true, 'a process with a live thread is alive');
  recordAsServer(mine, holder.pid!);
  try {
    const { started, status } = await startServer(mine);
    assert.equal(started, true);
    assert.equal(status.running, true);
    assert.equal(isAlive(holder.pid!), false);
  } finally {
    holder.kill('SIGKILL');
    await stopServer(mine);
  }
});

test('our recorded server whose port does not answer yet is waited for: nothing else started, no stranger named', async () => {
  // A server of ours still binding (or a status check whose connect lost to its timer on a busy event
  // loop): here a process with our command line that listens 1.5 s after it is recorded.
  const mine = await ownState('tempo-rl-binding-');
  const port = mine.server.port;
  const late = spawn(process.execPath, [
    '-e',
    `setTimeout(() => require('net').createServer().listen(${port}, '127.0.0.1'), 1500); setInterval(() => {}, 1000)`,
    'start-dev',
  ]);
  recordAsServer(mine, late.pid!);
  try {
    const { started, status } = await startServer(mine);
    assert.equal(started, false);
    assert.equal(status.running, true);
    assert.equal(status.pid, late.pid);
  } finally {
    late.kill('SIGKILL');
  }
});
