// python_env.openenv: an OpenEnv server for rollout.environment openenv, and what such a config must
// have (config/schema.ts applies it to the whole tree).
import { z } from 'zod';
import { seconds } from './bounds.js';

/** An OpenEnv environment (rollout.environment openenv): a running OpenEnv 0.3 server by its URL, or
 *  an ASGI app that each environment worker starts as a local process (docs/environments.md). */
export const OpenEnvConfig = z
  .strictObject({
    /** A running server: http(s):// or ws(s)://host[:port] (its sessions are at /ws). */
    url: z
      .string()
      .refine((u) => u === '' || /^(https?|wss?):\/\/[^\s/?#]+\/?$/.test(u), {
        error: 'is not an http(s):// or ws(s):// address of a server (host[:port], no path)',
      })
      .default(''),
    /** An ASGI app, module:attr (e.g. tempo_rl_guess:app), served by uvicorn in the worker's Python. */
    app: z
      .string()
      .refine((a) => a === '' || /^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$/.test(a), {
        error: "is not module:attr (an ASGI app importable in the environment worker's Python)",
      })
      .default(''),
    /** How a model turn becomes the action: tool — its last call of the `step` tool, whose parameters
     *  are the environment's action schema; text — the turn's text is the value of text_field. */
    action: z.enum(['tool', 'text']).default('tool'),
    /** action text: the action's string field that takes the turn's text. */
    text_field: z.string().default(''),
    /** The observation's string field the model reads; empty: the whole observation, as JSON. */
    observation_field: z.string().default(''),
    /** The episode's reward: the sum of its steps' rewards, or the last step's. */
    reward: z.enum(['sum', 'last']).default('sum'),
    /** One reset or step: a server that does not answer within it is cut and the step retried (replayed). */
    step_timeout_s: seconds().positive().default(60),
  })
  .prefault({});

/** What an OpenEnv config must have, and python_env.openenv refused where it would be ignored. */
export function openEnvIssues(
  rollout: { environment: string; multi_turn: boolean },
  p: { args: Record<string, unknown>; harness: string; openenv: z.infer<typeof OpenEnvConfig> },
): Array<{ path: string[]; message: string }> {
  const o = p.openenv;
  const at = (key: string, message: string) => ({ path: ['python_env', 'openenv', key], message });
  if (rollout.environment !== 'openenv') {
    const changed = Object.entries(OpenEnvConfig.parse({})).find(([k, v]) => o[k as keyof typeof o] !== v);
    return changed
      ? [
          at(
            changed[0],
            'configures an OpenEnv server, which runs only with rollout.environment openenv (it would be ignored)',
          ),
        ]
      : [];
  }
  const issues: Array<{ path: string[]; message: string }> = [];
  if ((o.url === '') === (o.app === ''))
    issues.push(
      at(
        o.url ? 'app' : 'url',
        o.url
          ? 'and python_env.openenv.url are both set: name the server one way (a URL, or an app to start)'
          : 'or python_env.openenv.app is required when rollout.environment is openenv (a running server, or an ASGI app module:attr to start)',
      ),
    );
  if (o.action === 'text' && o.text_field === '')
    issues.push(
      at(
        'text_field',
        "is required when python_env.openenv.action is text (the action's field the turn's text goes to)",
      ),
    );
  if (o.action !== 'text' && o.text_field !== '')
    issues.push(at('text_field', 'is read only with python_env.openenv.action text (it would be ignored)'));
  if (p.harness !== 'null')
    issues.push({
      path: ['python_env', 'harness'],
      message: 'is a verifiers harness: an OpenEnv episode has none (it would be ignored)',
    });
  for (const key of ['seed', 'episode_id'])
    if (key in p.args)
      issues.push({
        path: ['python_env', 'args', key],
        message: `is set by tempo-rl for an OpenEnv reset (seed: the row's task index; episode_id: the episode's id)`,
      });
  if (!rollout.multi_turn)
    issues.push({
      path: ['rollout', 'multi_turn'],
      message: 'must be true for the openenv environment: the episode steps the environment after each turn',
    });
  return issues;
}
