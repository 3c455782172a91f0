// An "engine" that answers GET /health and nothing else: for stacks whose engines are given by URL
// (engines.urls must answer before a stack starts: supervise/preflight.ts) and never generate.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export async function healthStub(): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    res.writeHead(req.url === '/health' ? 200 : 404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
