// One engine's HTTP transport: axios, every failure turned into a typed EngineError and
// every body validated with zod before anyone reads it.
import http from 'node:http';
import axios, { type AxiosInstance, type AxiosRequestConfig, isAxiosError } from 'axios';
import type { z } from 'zod';
import { EngineHttpError, EngineMalformedResponseError, EngineTimeoutError, EngineUnreachableError } from './errors.js';

const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  'ERR_SOCKET_CLOSED',
]);

export interface CallOptions {
  params?: Record<string, string | number | boolean>;
  headers?: Record<string, string>;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export class EngineHttp {
  private readonly axios: AxiosInstance;

  constructor(
    readonly url: string,
    readonly timeoutMs: number,
  ) {
    this.axios = axios.create({
      baseURL: url,
      timeout: timeoutMs,
      // No keep-alive: uvicorn drops idle connections after 5 s and a request written into one that is
      // closing fails with EPIPE, which would look like a dead engine. Loopback connects cost ~0.1 ms.
      httpAgent: new http.Agent({ keepAlive: false, maxSockets: 256 }),
      // Bodies are parsed here so that a non-JSON answer is a malformed-response error, not a crash.
      responseType: 'text',
      transformResponse: (data: unknown) => data,
      validateStatus: () => true,
      maxBodyLength: Infinity,
      maxContentLength: Infinity,
    });
  }

  /** A JSON call whose answer must match `schema`. */
  async json<S extends z.ZodType>(
    method: 'GET' | 'POST',
    route: string,
    schema: S,
    body?: unknown,
    opts: CallOptions = {},
  ): Promise<z.infer<S>> {
    const text = await this.text(method, route, body, opts);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new EngineMalformedResponseError(this.url, route, `not JSON: ${text.slice(0, 200)}`);
    }
    const result = schema.safeParse(parsed);
    if (!result.success) {
      const issues = result.error.issues.slice(0, 5).map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
      throw new EngineMalformedResponseError(this.url, route, issues.join('; '));
    }
    return result.data;
  }

  /** A call whose 2xx body is returned as text (empty bodies allowed). */
  async text(method: 'GET' | 'POST', route: string, body?: unknown, opts: CallOptions = {}): Promise<string> {
    const timeout = opts.timeoutMs ?? this.timeoutMs;
    const config: AxiosRequestConfig = {
      method,
      url: route,
      data: body,
      params: opts.params,
      headers: opts.headers,
      timeout,
      signal: opts.signal,
    };
    let res;
    try {
      res = await this.axios.request<string>(config);
    } catch (err) {
      throw this.translate(err, route, timeout);
    }
    const text = typeof res.data === 'string' ? res.data : JSON.stringify(res.data ?? '');
    if (res.status < 200 || res.status >= 300) throw new EngineHttpError(this.url, route, res.status, text);
    return text;
  }

  private translate(err: unknown, route: string, timeoutMs: number): Error {
    if (!isAxiosError(err)) return err as Error;
    const code = err.code ?? '';
    if (code === 'ECONNABORTED' || code === 'ETIMEDOUT' || code === 'ERR_CANCELED')
      return new EngineTimeoutError(this.url, route, timeoutMs);
    if (UNREACHABLE_CODES.has(code)) return new EngineUnreachableError(this.url, route, code);
    return new EngineUnreachableError(this.url, route, code || err.message);
  }
}
