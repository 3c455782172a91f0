// What is checked before a stack is started for a run (supervise/stack.ts ensureStack), so that a
// run that cannot work fails at once, naming why, with nothing started: a kill point no worker
// reaches (TEMPO_RL_KILL_AT, which every worker inherits), GPUs the machine does not have, engines
// given by URL that do not answer.
import type { TempoConfig } from '../config/schema.js';
import { VllmClient } from '../engine/client.js';
import { checkGpus } from './gpus.js';
import { killPointsFromEnv } from './kill-points.js';

/** What keeps a stack from serving a run: a dead worker, an engine that does not answer. */
export class StackProblem extends Error {
  readonly exitCode = 1;
  constructor(message: string) {
    super(message);
    this.name = 'StackProblem';
  }
}

/** Why an engine does not answer /health (the error's code or first line), or null when it does. */
export async function engineSilence(url: string): Promise<string | null> {
  try {
    await new VllmClient({ url, timeoutMs: 5_000 }).health(5_000);
    return null;
  } catch (err) {
    const e = err as Error & { code?: string; cause?: { code?: string } };
    return e.cause?.code ?? e.code ?? e.message.split('\n')[0]!.slice(0, 200);
  }
}

/** engines.urls that do not answer. */
export async function checkEngineUrls(cfg: TempoConfig): Promise<void> {
  const silent = (
    await Promise.all(cfg.engines.urls.map(async (url) => ({ url, why: await engineSilence(url) })))
  ).filter((e) => e.why !== null);
  if (silent.length > 0)
    throw new StackProblem(
      `engines.urls: ${silent.map((e) => `${e.url} does not answer (GET /health: ${e.why})`).join('; ')}; nothing was started`,
    );
}

/** Every check before a stack starts; throws the first problem (exit 2 for a usage error). */
export async function preflight(cfg: TempoConfig, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  try {
    killPointsFromEnv(env);
  } catch (err) {
    throw Object.assign(new Error(`${(err as Error).message}; nothing was started`), { exitCode: 2 });
  }
  checkGpus(cfg, env);
  await checkEngineUrls(cfg);
}
