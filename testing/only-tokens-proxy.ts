// An HTTP proxy in front of a vLLM engine that restricts sampling, for tests and benches: every generate
// request that passes through it samples only among the given token ids (vLLM's own allowed_token_ids,
// added to the request's sampling_params here); every other request and every answer pass as they are.
// The product never restricts sampling, and its requests carry no such field: a synthetic policy is
// the proxy's doing alone, so engines shared with other test files (or benches) stay unrestricted.
//   - the learning test: eight one-letter tokens, a task the tiny random model learns in a few steps;
//   - the rollout benches: word pieces and <tool_call>, so turns end where the bench wants them to.
// The engine's logprobs are then the restricted softmax's, and the trainer's the full vocabulary's:
// the logprob diff metric (train/train_rollout_logprob_abs_diff) reads their gap, nothing else does
// while each step is one on-policy update.
import http from 'node:http';
import type net from 'node:net';
import { ROUTES } from '../engine/client.js';

export interface OnlyTokensProxy {
  /** Where to send the engine's requests (engines.urls). */
  url: string;
  close(): Promise<void>;
}

/** The body of a generate request with its sampling restricted to `ids` (other bodies: unchanged). */
export function restrictedBody(path: string, body: Buffer, ids: readonly number[]): Buffer {
  if (path.split('?')[0] !== ROUTES.generate || body.length === 0) return body;
  const req = JSON.parse(body.toString('utf8')) as { sampling_params?: Record<string, unknown> };
  req.sampling_params = { ...req.sampling_params, allowed_token_ids: [...ids] };
  return Buffer.from(JSON.stringify(req));
}

export async function startOnlyTokensProxy(engineUrl: string, ids: readonly number[]): Promise<OnlyTokensProxy> {
  if (!ids.length) throw new Error('only-tokens proxy: no token ids');
  const target = new URL(engineUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const sockets = new Set<net.Socket>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: Buffer;
      try {
        body = restrictedBody(req.url ?? '/', Buffer.concat(chunks), ids);
      } catch (err) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end(`only-tokens proxy: ${(err as Error).message}`);
        return;
      }
      const headers = { ...req.headers, host: target.host, 'content-length': String(body.length) };
      delete headers.connection;
      const upstream = http.request(
        { agent, host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      upstream.on('error', (err) => {
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`only-tokens proxy: ${err.message}`);
      });
      // A client that gives up (an episode's cancelled generate) aborts the engine's request too.
      res.on('close', () => {
        if (!res.writableFinished) upstream.destroy();
      });
      upstream.end(body);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      agent.destroy();
    },
  };
}
