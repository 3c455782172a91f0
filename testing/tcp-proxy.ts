// A loopback TCP proxy in front of an engine. Closing it makes the engine unreachable exactly as a dead
// process does (connection refused), without killing engines that other test files share.
import net from 'node:net';

export interface TcpProxy {
  url: string;
  port: number;
  kill(): Promise<void>;
  revive(): Promise<void>;
}

export async function tcpProxy(targetUrl: string): Promise<TcpProxy> {
  const target = new URL(targetUrl);
  const sockets = new Set<net.Socket>();
  let server: net.Server | null = null;
  let port = 0;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server = net.createServer((client) => {
        const upstream = net.connect({ host: target.hostname, port: Number(target.port) });
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on('close', () => sockets.delete(s));
          s.on('error', () => s.destroy());
        }
        client.pipe(upstream).pipe(client);
      });
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        port = (server!.address() as net.AddressInfo).port;
        resolve();
      });
    });
  await listen();
  return {
    get url() {
      return `http://127.0.0.1:${port}`;
    },
    get port() {
      return port;
    },
    kill: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        if (!server) return resolve();
        server.close(() => resolve());
        server = null;
      }),
    revive: listen,
  };
}
