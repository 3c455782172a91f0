// The tests' free ports: distinct, free, and below the kernel's ephemeral range, where no outgoing
// connection can take the port of a server a test kills and starts again (a restarted Temporal server
// once found its port held as the local end of another process's connection).
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { ephemeralPortsFrom, freePorts, portOpen } from '../../supervise/process.js';

test('freePorts: distinct ports below the ephemeral range, each free to listen on', async () => {
  const ports = await freePorts(8);
  assert.equal(new Set(ports).size, 8, `distinct: ${ports}`);
  for (const port of ports) {
    assert.ok(port >= 10000 && port < ephemeralPortsFrom(), `${port} lies in 10000–${ephemeralPortsFrom() - 1}`);
    const srv = net.createServer();
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      srv.listen(port, '127.0.0.1', () => resolve());
    });
    await new Promise((r) => srv.close(r));
  }
});

test('portOpen: a listening port answers even when the event loop was held up past the timeout', async () => {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', () => resolve()));
  const { port } = srv.address() as net.AddressInfo;
  try {
    const open = portOpen('127.0.0.1', port, 100);
    const t0 = Date.now();
    while (Date.now() - t0 < 400) {
      // held up: the timer expires before the loop sees the connect's answer
    }
    assert.equal(await open, true);
    srv.close();
    await new Promise((r) => srv.once('close', r));
    assert.equal(await portOpen('127.0.0.1', port, 100), false, 'a closed port still reads as closed');
  } finally {
    srv.close();
  }
});
