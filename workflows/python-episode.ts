// A Python environment's episode (rollout.environment verifiers; docs/environments.md "Bring your own
// environment"). The environment worker runs the environment's harness in one activity; each model
// call it makes comes back as a modelCall update, which this workflow answers as it answers a turn
// of a TypeScript environment — render, generate through tempo-rl's engines, token-exact — and
// records by call index. A retried activity (its worker killed, the environment hung) reruns the
// harness from the start: its calls 0..k-1 get the recorded completions back, provided each request
// is the one recorded; a request that differs fails the episode as diverged at that call.
import { ActivityFailure, ApplicationFailure, proxyActivities, setHandler } from '@temporalio/workflow';
import type { EpisodeStatus, Stop } from '../lib/trajectory.js';
import { responseBudget } from '../lib/trajectory.js';
import type {
  EnvironmentActivities,
  GenerateTurnInput,
  GenerateTurnResult,
  RenderObservationInput,
  RenderObservationResult,
  RenderPromptInput,
  RenderPromptResult,
  SampleTurn,
  TrajectoryStep,
} from '../protocol/activities.js';
import {
  modelCallUpdate,
  type EpisodeInput,
  type EpisodeProgress,
  type ModelCallRequest,
  type ModelCallResult,
  type PythonEnvSettings,
} from '../protocol/episode.js';
import { turnRequest } from './turn-request.js';

/** The environment worker's failures that a retry cannot fix (workers/environments/environments/errors.py). */
export const ENVIRONMENT_NON_RETRYABLE = [
  'EnvironmentNotInstalled',
  'InvalidEnvironment',
  'EnvironmentDiverged',
  'EnvironmentFailed',
];

/** What a Python episode fills in of the episode's turns (workflows/episode.ts Turns). */
export interface PythonTurns {
  prompt: RenderPromptResult | null;
  trajectory: TrajectoryStep | null;
  stop: Stop | null;
  done: { status: EpisodeStatus; reason: string | null } | null;
  envReward: number | null;
  readonly recipe: SampleTurn[];
  readonly responseLen: number;
}

export interface PythonActs {
  renderPrompt(input: RenderPromptInput): Promise<RenderPromptResult>;
  renderObservation(input: RenderObservationInput): Promise<RenderObservationResult>;
  generateTurn(input: GenerateTurnInput): Promise<GenerateTurnResult>;
}

const stopped = (reason: string) =>
  ApplicationFailure.nonRetryable(`the episode ended (${reason}): no more model calls`, 'EpisodeStopped');

function causeOf(err: unknown): string {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure) return `${cause.type ?? 'error'}: ${cause.message}`;
  return (cause as Error)?.message ?? String(cause);
}

function checkRequest(req: ModelCallRequest): void {
  const ok =
    req !== null &&
    typeof req === 'object' &&
    Number.isInteger(req.call) &&
    req.call >= 0 &&
    typeof req.digest === 'string' &&
    Array.isArray(req.messages) &&
    Array.isArray(req.tools);
  if (!ok) throw new Error(`modelCall: not a model call request (${JSON.stringify(req)?.slice(0, 200)})`);
}

/** The model calls of one episode, answered one at a time and recorded by index. */
class ModelCalls {
  private readonly records: Array<{ digest: string; result: ModelCallResult }> = [];
  private tools: ModelCallRequest['tools'] = [];
  private budget = 0;
  private queue: Promise<unknown> = Promise.resolve();
  /** Why the episode failed inside a call (an activity, a divergence): the episode's cause. */
  failure: string | null = null;

  constructor(
    private readonly id: string,
    private readonly input: EpisodeInput,
    private readonly turns: PythonTurns,
    private readonly acts: PythonActs,
    private readonly progress: EpisodeProgress,
  ) {}

  answer(req: ModelCallRequest): Promise<ModelCallResult> {
    const next = this.queue.then(() => this.call(req));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async call(req: ModelCallRequest): Promise<ModelCallResult> {
    const recorded = this.records[req.call];
    if (recorded) {
      if (recorded.digest === req.digest) return recorded.result;
      this.failure = `EnvironmentDiverged: diverged at model call ${req.call}: the rerun environment sent a request other than the recorded one`;
      throw ApplicationFailure.nonRetryable(this.failure, 'EnvironmentDiverged');
    }
    if (req.call !== this.records.length) {
      this.failure = `EnvironmentDiverged: diverged at model call ${req.call}: calls 0..${this.records.length - 1} are recorded, so the next is ${this.records.length}`;
      throw ApplicationFailure.nonRetryable(this.failure, 'EnvironmentDiverged');
    }
    const s = this.input.settings;
    if (this.turns.stop) throw stopped(this.turns.stop.reason ?? 'stopped');
    if (req.call >= s.max_turns) {
      this.turns.stop = { status: 'TRUNCATED', reason: 'out_of_turns' };
      throw stopped('out_of_turns');
    }
    try {
      const result = await this.generate(req);
      this.records.push({ digest: req.digest, result });
      return result;
    } catch (err) {
      if (err instanceof ApplicationFailure && err.type === 'EpisodeStopped') throw err;
      this.failure = causeOf(err);
      throw ApplicationFailure.nonRetryable(this.failure, 'ModelCallFailed');
    }
  }

  private async generate(req: ModelCallRequest): Promise<ModelCallResult> {
    const s = this.input.settings;
    const turn = req.call + 1;
    const t = this.turns;
    if (req.call === 0) {
      this.tools = req.tools;
      t.prompt = await this.acts.renderPrompt({ episode_id: this.id, messages: req.messages, tools: req.tools });
      this.budget = responseBudget(t.prompt.prompt_len, s.max_response_len, s.max_context_len);
      this.progress.budget = this.budget;
    } else {
      this.progress.phase = 'observation';
      t.trajectory = await this.acts.renderObservation({
        episode_id: this.id,
        observation: '',
        messages: req.messages,
        tools: this.tools,
        trajectory_ref: t.trajectory!.trajectory_ref!,
        conventions: t.prompt!.conventions,
      });
      t.stop = t.trajectory.stop;
      if (t.stop) throw stopped(t.stop.reason ?? 'stopped');
    }
    const maxTokens = this.budget - t.responseLen;
    if (maxTokens < 1) {
      t.stop = { status: 'TRUNCATED', reason: 'budget_exhausted' };
      throw stopped('budget_exhausted');
    }
    Object.assign(this.progress, { phase: 'generate', turn });
    const before = t.responseLen;
    const gen = await this.acts.generateTurn(
      turnRequest(this.input, this.id, turn, t.prompt!, t.trajectory?.trajectory_ref ?? null, maxTokens),
    );
    t.recipe.push({ engine: gen.engine, weight_version: gen.weight_version, finish_reason: gen.finish_reason });
    t.trajectory = gen;
    // A turn cut short (length, the context) is still answered; the episode takes no call after it.
    t.stop = gen.stop;
    this.progress.response_len = t.responseLen;
    this.progress.phase = 'env';
    return {
      text: gen.text,
      finish_reason: gen.finish_reason,
      prompt_tokens: t.prompt!.prompt_len + before,
      completion_tokens: gen.generated_tokens,
    };
  }
}

function environmentActivities(p: PythonEnvSettings): EnvironmentActivities {
  return proxyActivities<EnvironmentActivities>({
    taskQueue: p.task_queue,
    startToCloseTimeout: `${p.episode_timeout_s} seconds`,
    // The worker heartbeats every 2 s while the episode runs: a killed worker is noticed within this.
    heartbeatTimeout: '10 seconds',
    retry: {
      initialInterval: '1 second',
      maximumInterval: '10 seconds',
      maximumAttempts: p.attempts,
      nonRetryableErrorTypes: ENVIRONMENT_NON_RETRYABLE,
    },
  });
}

/** The dataset row's task index (its label: lib/data/load.ts, synthetic_task taskset), or null. A plain
 *  throw here would fail the workflow task again and again: the caller fails the episode instead. */
export function taskIndexOf(label: string): number | null {
  const n = Number(label);
  return /^\d+$/.test(label) && Number.isSafeInteger(n) ? n : null;
}

/** Plays a Python environment's episode into `turns`: its harness in the environment worker, its model
 *  calls answered here. Ends with turns.done or turns.stop set. */
export async function playPythonEpisode(
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
      reason: `InvalidEnvironment: the row's label ${JSON.stringify(input.label)} is not a task index (dataset.synthetic_task taskset)`,
    };
    return;
  }
  const calls = new ModelCalls(id, input, turns, acts, progress);
  setHandler(modelCallUpdate, (req) => calls.answer(req), { validator: checkRequest });
  progress.phase = 'env';
  let result;
  try {
    result = await environmentActivities(p).runVerifiersEpisode({
      workflow_id: workflowId,
      task_index: task,
      environment: { id: p.id, args: p.args, harness: p.harness },
    });
  } catch (err) {
    turns.stop = { status: 'FAILED', reason: calls.failure ?? causeOf(err) };
    return;
  }
  if (calls.failure) turns.stop = { status: 'FAILED', reason: calls.failure };
  else if (!turns.trajectory)
    turns.stop = {
      status: 'FAILED',
      reason: `the environment made no model call (${result.errors.join('; ') || 'no error'})`,
    };
  else if (turns.stop) turns.envReward = result.reward;
  else if (!result.ok) turns.stop = { status: 'FAILED', reason: `EnvironmentFailed: ${result.errors.join('; ')}` };
  else {
    turns.done = { status: 'COMPLETED', reason: null };
    turns.envReward = result.reward;
  }
}
