// The JSON API the page reads (all GET, all read-only): runs, a run, a step, a run's search, an
// episode and its image. Query parameters are checked with zod; a bad one is a 400 naming it.
import { Hono } from 'hono';
import { z } from 'zod';
import { UiError, type Served, type UiContext } from './context.js';
import { episodeImage, episodeView } from './episode.js';
import { listRuns, runDetail } from './runs.js';
import { SearchQuery, searchEpisodes } from './search.js';
import { groupView, stepView } from './steps.js';

const StepParam = z
  .string()
  .regex(/^\d{1,9}$/, 'expected an integer ≥ 0')
  .transform(Number);
const EpisodeQuery = z.strictObject({ id: z.string().min(1).max(500) });
const ImageQuery = z.strictObject({ id: z.string().min(1).max(500), index: StepParam });

/** Parses request values with a schema; the first problem becomes a 400 naming the value. */
export function parseParams<T extends z.ZodType>(schema: T, values: Record<string, string>, what: string): z.infer<T> {
  const parsed = schema.safeParse(values);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const key = issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : issue.path.join('.');
  const given = issue.code === 'unrecognized_keys' ? '' : `, got ${JSON.stringify(values[key] ?? null)}`;
  throw new UiError(400, `${what} ${key}: ${issue.message}${given}`);
}

export function apiRoutes(ctx: UiContext, served: () => Served): Hono {
  const api = new Hono();
  // what the page's banners say: the Temporal server's state, and a --host beyond loopback
  api.get('/status', (c) => c.json({ temporal: ctx.temporal.state(), served: served() }));
  api.get('/runs', async (c) => c.json(await listRuns(ctx)));
  api.get('/runs/:run', async (c) => c.json(await runDetail(ctx, c.req.param('run'))));
  api.get('/runs/:run/steps/:step', async (c) => {
    const { step } = parseParams(z.object({ step: StepParam }), { step: c.req.param('step') }, 'step');
    return c.json(await stepView(ctx, c.req.param('run'), step));
  });
  api.get('/runs/:run/steps/:step/groups/:prompt', async (c) => {
    const { step, prompt } = parseParams(
      z.object({ step: StepParam, prompt: StepParam }),
      { step: c.req.param('step'), prompt: c.req.param('prompt') },
      'path',
    );
    return c.json(await groupView(ctx, c.req.param('run'), step, prompt));
  });
  api.get('/runs/:run/episodes', async (c) => {
    const q = parseParams(SearchQuery, c.req.query(), 'query parameter');
    return c.json(await searchEpisodes(ctx, c.req.param('run'), q));
  });
  api.get('/episode', async (c) => {
    const { id } = parseParams(EpisodeQuery, c.req.query(), 'query parameter');
    return c.json(await episodeView(ctx, id));
  });
  api.get('/episode/image', async (c) => {
    const { id, index } = parseParams(ImageQuery, c.req.query(), 'query parameter');
    const image = await episodeImage(ctx, id, index);
    return c.body(new Uint8Array(image.bytes), 200, { 'Content-Type': image.type });
  });
  api.all('*', (c) => c.json({ error: `no API ${JSON.stringify(c.req.path)}` }, 404));
  return api;
}
