// An OpenEnv environment's episode (rollout.environment openenv; docs/environments.md "Bring your own
// environment"). The workflow owns the turn loop as for a TypeScript environment: the server's reset
// gives the first user message, then per turn it renders and generates through tempo-rl's engines
// (token-exact) and sends the turn to the environment worker, which parses the action out of it,
// steps the server and answers with the observation's text, the reward and done.
//
// The server keeps the episode's state in its session, so the history keeps what rebuilds it: the
// reset's arguments and each action sent, with a digest of each answer. Each step carries that
// record; a worker that finds no live session (its predecessor or the server died) rebuilds one by
// replaying it, each answer checked, and a mismatch fails the episode as diverged at that step.
// Steps go to the queue of the worker that holds the session, and to the shared queue once that
// worker is gone.
import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import { responseBudget } from '../lib/trajectory.js';
import type {
  EnvironmentActivities,
  OpenEnvRecord,
  OpenEnvResetResult,
  OpenEnvSpec,
  OpenEnvStepResult,
} from '../protocol/activities.js';
import type { ToolSpec } from '../engine/types.js';
import type { EpisodeInput, EpisodeProgress, PythonEnvSettings } from '../protocol/episode.js';
import { ENVIRONMENT_NON_RETRYABLE, taskIndexOf, type PythonActs, type PythonTurns } from './python-episode.js';
import { turnRequest } from './turn-request.js';

/** How long a step waits for the worker that holds its session to pick it up: past this, that
 *  worker is taken for gone and the step goes to the shared queue (a rebuild by replay). */
const SESSION_PICKUP = '10 seconds';

function causeOf(err: unknown): string {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure) return `${cause.type ?? 'error'}: ${cause.message}`;
  return (cause as Error)?.message ?? String(cause);
}

/** A failure that a retry cannot fix (the worker said so): not worth another worker. */
function isFinal(err: unknown): boolean {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && (cause.nonRetryable || ENVIRONMENT_NON_RETRYABLE.includes(cause.type!));
}

/** The episode's OpenEnv session as the workflow sees it: the worker holding it and the record that rebuilds it. */
class OpenEnvSession {
  private queue: string | null = null;
  private readonly recorded: OpenEnvRecord = { reset: '', steps: [] };
  private open = false;
  private readonly spec: OpenEnvSpec;
  private readonly shared: EnvironmentActivities;

  constructor(
    private readonly workflowId: string,
    private readonly p: PythonEnvSettings,
    private readonly resetArgs: Record<string, unknown>,
  ) {
    const { reward: _, ...spec } = p.openenv!;
    this.spec = spec;
    this.shared = proxyActivities<EnvironmentActivities>({
      taskQueue: p.task_queue,
      startToCloseTimeout: `${p.episode_timeout_s} seconds`,
      // The worker heartbeats every 2 s while it works: a killed worker is noticed within this.
      heartbeatTimeout: '10 seconds',
      retry: {
        initialInterval: '1 second',
        maximumInterval: '10 seconds',
        maximumAttempts: p.attempts,
        nonRetryableErrorTypes: ENVIRONMENT_NON_RETRYABLE,
      },
    });
  }

  /** The worker that holds the session: one attempt, and a short wait to be picked up. */
  private onWorker(queue: string, attempts = 1): EnvironmentActivities {
    return proxyActivities<EnvironmentActivities>({
      taskQueue: queue,
      scheduleToStartTimeout: SESSION_PICKUP,
      startToCloseTimeout: `${this.p.episode_timeout_s} seconds`,
      heartbeatTimeout: '10 seconds',
      retry: { maximumAttempts: attempts },
    });
  }

  async reset(): Promise<OpenEnvResetResult> {
    const r = await this.shared.openenvReset({
      workflow_id: this.workflowId,
      environment: this.spec,
      reset: this.resetArgs,
    });
    this.queue = r.session_queue;
    this.recorded.reset = r.digest!;
    this.open = !r.done;
    return r;
  }

  async step(text: string, turn: number): Promise<OpenEnvStepResult> {
    const input = {
      workflow_id: this.workflowId,
      environment: this.spec,
      reset: this.resetArgs,
      recorded: { reset: this.recorded.reset, steps: [...this.recorded.steps] },
      text,
      turn,
    };
    let r: OpenEnvStepResult | null = null;
    if (this.queue) {
      try {
        r = await this.onWorker(this.queue).openenvStep(input);
      } catch (err) {
        if (isFinal(err)) throw err;
        // Its worker is gone (or failed this attempt): any worker rebuilds the session from the record.
      }
    }
    r ??= await this.shared.openenvStep(input);
    this.queue = r.session_queue;
    if (r.action !== null) this.recorded.steps.push({ action: r.action, digest: r.digest! });
    this.open = !r.done;
    return r;
  }

  /** Frees the server's session when the episode ends before the environment is done (best effort). */
  async close(): Promise<void> {
    if (!this.open || !this.queue) return;
    this.open = false;
    try {
      await this.onWorker(this.queue).openenvClose({ workflow_id: this.workflowId });
    } catch {
      // Its worker is gone, and the session with it.
    }
  }
}

/** Plays an OpenEnv environment's episode into `turns`. Ends with turns.done or turns.stop set. */
export async function playOpenEnvEpisode(
  id: string,
  workflowId: string,
  input: EpisodeInput,
  turns: PythonTurns,
  acts: PythonActs,
  progress: EpisodeProgress,
): Promise<void> {
  const p = input.settings.python_env!;
  const task = taskIndexOf(input.label);
  if (task === null) {
    turns.stop = {
      status: 'FAILED',
      reason: `InvalidEnvironment: the row's label ${JSON.stringify(input.label)} is not a task index (dataset.synthetic_task taskset: the reset's seed)`,
    };
    return;
  }
  const session = new OpenEnvSession(workflowId, p, { ...p.args, seed: task, episode_id: id });
  const rewards: number[] = [];
  try {
    progress.phase = 'env';
    const reset = await session.reset();
    if (reset.done) {
      turns.stop = { status: 'FAILED', reason: 'EnvironmentFailed: the OpenEnv environment was done at reset' };
      return;
    }
    await playTurns(id, input, turns, acts, progress, session, reset, rewards);
  } catch (err) {
    turns.stop = { status: 'FAILED', reason: causeOf(err) };
  } finally {
    await session.close();
  }
  turns.envReward = p.openenv!.reward === 'last' ? (rewards.at(-1) ?? 0) : rewards.reduce((a, b) => a + b, 0);
}

async function playTurns(
  id: string,
  input: EpisodeInput,
  turns: PythonTurns,
  acts: PythonActs,
  progress: EpisodeProgress,
  session: OpenEnvSession,
  reset: OpenEnvResetResult,
  rewards: number[],
): Promise<void> {
  const s = input.settings;
  const tools: ToolSpec[] = reset.tools;
  progress.phase = 'render';
  const prompt = await acts.renderPrompt({
    episode_id: id,
    messages: [...input.prompt.messages, { role: 'user', content: reset.observation }],
    tools,
  });
  turns.prompt = prompt;
  const budget = responseBudget(prompt.prompt_len, s.max_response_len, s.max_context_len);
  progress.budget = budget;
  for (let turn = 1; turn <= s.max_turns; turn++) {
    const maxTokens = budget - turns.responseLen;
    if (maxTokens < 1) {
      turns.stop = { status: 'TRUNCATED', reason: 'budget_exhausted' };
      return;
    }
    Object.assign(progress, { phase: 'generate', turn });
    const gen = await acts.generateTurn(
      turnRequest(input, id, turn, prompt, turns.trajectory?.trajectory_ref ?? null, maxTokens),
    );
    turns.recipe.push({ engine: gen.engine, weight_version: gen.weight_version, finish_reason: gen.finish_reason });
    turns.trajectory = gen;
    turns.stop = gen.stop;
    progress.response_len = turns.responseLen;
    // A turn complete but for the synthetic EOS still acts; one cut short (length, the context) does not.
    if (turns.stop && turns.stop.reason !== 'no_budget_for_eos') return;
    progress.phase = 'env';
    const step = await session.step(gen.text, turn);
    if (step.reward !== null) rewards.push(step.reward);
    if (step.done) {
      turns.done = { status: 'COMPLETED', reason: null };
      return;
    }
    if (turns.stop) return;
    if (turn === s.max_turns) {
      turns.stop = { status: 'TRUNCATED', reason: 'out_of_turns' };
      return;
    }
    progress.phase = 'observation';
    turns.trajectory = await acts.renderObservation({
      episode_id: id,
      observation: step.observation,
      tools,
      trajectory_ref: gen.trajectory_ref!,
      conventions: prompt.conventions,
    });
    turns.stop = turns.trajectory.stop;
    progress.response_len = turns.responseLen;
    if (turns.stop) return;
  }
}
