// The start-up probe: does this engine serve every route tempo-rl uses? Reads the engine's OpenAPI
// document (vLLM leaves disabled scale-out routes out of it), and says which flag enables what is missing.
import { EngineCapabilityError, EngineHttpError } from './errors.js';
import { EngineHttp } from './http.js';
import { ROUTES } from './client.js';
import { OpenApiResponse, VersionResponse } from './schemas.js';
import type { Capabilities } from './types.js';

const DEV_MODE = 'the environment variable VLLM_SERVER_DEV_MODE=1';
const SCALE_OUT = 'the server flag --enable-scale-out (vLLM >= 0.20)';

export const REQUIRED_ROUTES: Array<{ route: string; enable: string }> = [
  { route: ROUTES.health, enable: 'any vLLM OpenAI server' },
  { route: ROUTES.version, enable: 'any vLLM OpenAI server' },
  { route: ROUTES.metrics, enable: 'any vLLM OpenAI server' },
  { route: ROUTES.tokenize, enable: 'any vLLM OpenAI server' },
  { route: ROUTES.detokenize, enable: 'any vLLM OpenAI server' },
  { route: ROUTES.renderChat, enable: SCALE_OUT },
  { route: ROUTES.generate, enable: SCALE_OUT },
  { route: ROUTES.pause, enable: DEV_MODE },
  { route: ROUTES.resume, enable: DEV_MODE },
  { route: ROUTES.isPaused, enable: DEV_MODE },
  { route: ROUTES.resetPrefixCache, enable: DEV_MODE },
  { route: ROUTES.collectiveRpc, enable: DEV_MODE },
];

export async function probeCapabilities(url: string, timeoutMs = 10_000): Promise<Capabilities> {
  const http = new EngineHttp(url.replace(/\/+$/, ''), timeoutMs);
  const version = await http.json('GET', ROUTES.version, VersionResponse).then(
    (v) => v.version,
    () => null,
  );
  let paths: Set<string>;
  try {
    paths = new Set(Object.keys((await http.json('GET', '/openapi.json', OpenApiResponse)).paths));
  } catch (err) {
    if (!(err instanceof EngineHttpError && err.status === 404)) throw err;
    paths = await probeOneByOne(http);
  }
  const missing = REQUIRED_ROUTES.filter((r) => !paths.has(r.route));
  return { engine: http.url, ok: missing.length === 0, version, missing };
}

/** Throws an EngineCapabilityError listing every missing route and its switch. */
export async function requireCapabilities(url: string, timeoutMs?: number): Promise<Capabilities> {
  const caps = await probeCapabilities(url, timeoutMs);
  if (!caps.ok) throw new EngineCapabilityError(caps.engine, caps.missing);
  return caps;
}

// Servers started with --disable-fastapi-docs have no /openapi.json: an empty POST tells a missing
// route (404, or 403 for disabled scale-out routes) from a present one (400/422: bad body).
async function probeOneByOne(http: EngineHttp): Promise<Set<string>> {
  const found = new Set<string>();
  for (const { route } of REQUIRED_ROUTES) {
    const method = [ROUTES.health, ROUTES.version, ROUTES.metrics, ROUTES.isPaused].includes(route as never)
      ? 'GET'
      : 'POST';
    const mutating = route === ROUTES.pause || route === ROUTES.resume || route === ROUTES.resetPrefixCache;
    try {
      // Never pause a live engine to probe it: a mutating route is probed with GET (405 = present).
      await http.text(mutating ? 'GET' : method, route, method === 'POST' && !mutating ? {} : undefined);
      found.add(route);
    } catch (err) {
      if (err instanceof EngineHttpError && err.status !== 404 && err.status !== 403) found.add(route);
    }
  }
  return found;
}
