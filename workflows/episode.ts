// The episode workflow (docs/ARCHITECTURE.md "Episode"): render once, then per turn generate → env
// step → observation, then score and store the sample. Deterministic: all I/O is in activities. The
// tokens are stitched once, by the activities that add to the trajectory (protocol/activities.ts):
// the workflow keeps the trajectory's blob ref and counts, never its token arrays.
import {
  ActivityFailure,
  ApplicationFailure,
  getExternalWorkflowHandle,
  isCancellation,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import { responseBudget, type EpisodeStatus, type Stop } from '../lib/trajectory.js';
import type { RenderPromptResult, RolloutActivities, SampleTurn, TrajectoryStep } from '../protocol/activities.js';
import {
  episodeDoneSignal,
  episodeId,
  episodeProgressQuery,
  toolSummaryOf,
  type EpisodeInput,
  type EpisodeProgress,
  type EpisodeSummary,
} from '../protocol/episode.js';
import { playOpenEnvEpisode } from './openenv-episode.js';
import { playPythonEpisode } from './python-episode.js';
import { turnRequest } from './turn-request.js';

const NON_RETRYABLE = [
  'ImagePlaceholderMismatch',
  'TemplateNotPrefixStable',
  'EngineRequestRejected',
  'InvalidEngineAnswer',
  'UnknownEnvironment',
  'SampleMismatch',
  'InvalidSampleRecipe',
  'ObservationSpecialTokens',
  'ObservationImage',
  'InvalidImage',
];

function activitiesFor(input: EpisodeInput) {
  // The quick steps run as local activities: in the workflow task that follows a generate, with their
  // results recorded as markers, so a turn costs one activity and one workflow task instead of three
  // of each (bench/overhead.ts).
  const quick = proxyLocalActivities<RolloutActivities>({
    startToCloseTimeout: '30 seconds',
    retry: {
      initialInterval: '1 second',
      maximumInterval: '10 seconds',
      maximumAttempts: 5,
      nonRetryableErrorTypes: NON_RETRYABLE,
    },
  });
  const generate = proxyActivities<RolloutActivities>({
    startToCloseTimeout: `${input.settings.generate_timeout_s} seconds`,
    // A killed worker or a dead engine is noticed within this, and the retry goes to another engine.
    heartbeatTimeout: '15 seconds',
    retry: {
      initialInterval: '1 second',
      backoffCoefficient: 2,
      maximumInterval: '20 seconds',
      maximumAttempts: 8,
      nonRetryableErrorTypes: NON_RETRYABLE,
    },
  });
  // proxies are not enumerable: pick the activities by name
  return {
    renderPrompt: quick.renderPrompt,
    renderObservation: quick.renderObservation,
    envStep: quick.envStep,
    scoreEpisode: quick.scoreEpisode,
    storeSample: quick.storeSample,
    generateTurn: generate.generateTurn,
  };
}
type EpisodeActivities = ReturnType<typeof activitiesFor>;

function failureReason(err: unknown): string {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure) return `${cause.type ?? 'error'}: ${cause.message}`;
  return (cause as Error)?.message ?? String(cause);
}

function isFailedOrAborted(status: EpisodeStatus | undefined): boolean {
  return status === 'FAILED' || status === 'ABORTED';
}

/** An episode's turns and what they left: the trajectory's ref and counts, how it ended, the answer. */
class Turns {
  prompt: RenderPromptResult | null = null;
  /** The trajectory as the last activity that added to it left it (null: nothing generated yet). */
  trajectory: TrajectoryStep | null = null;
  stop: Stop | null = null;
  done: { status: EpisodeStatus; reason: string | null } | null = null;
  finalAnswer: string | null = null;
  /** The environment's grade of its final answer: the same grader the score step runs, so it is the reward. */
  envReward: number | null = null;
  /** The last turn's text, graded (its \boxed{}) when the episode ends without a final answer; null
   *  once the environment has answered that turn (a rejected tool call does not score by its \boxed{}). */
  lastText: string | null = null;
  /** The environment's per-episode state, as its last step returned it. */
  private envState: EpisodeInput['env_state'];
  readonly recipe: SampleTurn[] = [];

  constructor(
    private readonly id: string,
    private readonly input: EpisodeInput,
    private readonly acts: EpisodeActivities,
    private readonly progress: EpisodeProgress,
  ) {
    this.envState = input.env_state;
  }

  get responseLen(): number {
    return this.trajectory?.response_len ?? 0;
  }

  async play(): Promise<void> {
    const s = this.input.settings;
    const prompt = await this.acts.renderPrompt({
      episode_id: this.id,
      messages: this.input.prompt.messages,
      tools: s.multi_turn ? this.input.prompt.tools : [],
    });
    this.prompt = prompt;
    const budget = responseBudget(prompt.prompt_len, s.max_response_len, s.max_context_len);
    this.progress.budget = budget;
    const maxTurns = s.multi_turn ? s.max_turns : 1;
    for (let turn = 1; turn <= maxTurns && !this.stop && !this.done; turn++) {
      const maxTokens = budget - this.responseLen;
      if (maxTokens < 1) {
        this.stop = { status: 'TRUNCATED', reason: 'budget_exhausted' };
        return;
      }
      if (!(await this.turn(prompt, turn, maxTurns, maxTokens))) return;
    }
  }

  /** One turn: generate, then (multi-turn) the environment and its observation. False: the episode ends. */
  private async turn(prompt: RenderPromptResult, turn: number, maxTurns: number, maxTokens: number): Promise<boolean> {
    const s = this.input.settings;
    Object.assign(this.progress, { phase: 'generate', turn });
    const gen = await this.acts.generateTurn(
      turnRequest(this.input, this.id, turn, prompt, this.trajectory?.trajectory_ref ?? null, maxTokens),
    );
    this.lastText = gen.text;
    // null: the engine reported no weight version; recorded as unknown, never assumed.
    this.recipe.push({
      engine: gen.engine,
      weight_version: gen.weight_version,
      finish_reason: gen.finish_reason,
      ...(s.multi_turn ? { tool_answer: null, tool_score: null } : {}),
    });
    this.trajectory = gen;
    this.stop = gen.stop;
    this.progress.response_len = this.responseLen;
    // A turn complete but for the synthetic EOS (its stop string was the last token the budget
    // allowed) still goes to the environment: a correct tool call must count.
    const completeWithoutEos = s.multi_turn && this.stop?.reason === 'no_budget_for_eos';
    if (this.stop && !completeWithoutEos) return false;
    if (!s.multi_turn) {
      this.done = { status: 'COMPLETED', reason: null };
      return false;
    }
    this.progress.phase = 'env';
    const env = await this.acts.envStep({
      environment: s.environment,
      text: gen.text,
      label: this.input.label,
      turn,
      max_turns: maxTurns,
      tolerance: s.reward_tolerance,
      match: s.reward_match,
      ...(this.envState !== undefined ? { state: this.envState } : {}),
    });
    if (env.state !== undefined) this.envState = env.state;
    // The answer a tool call gave (calc_score, submit; null: none, another tool, or a malformed call), kept per turn.
    const answer = env.tool_call && !env.tool_call.error ? env.tool_call.answer : null;
    Object.assign(this.recipe[this.recipe.length - 1]!, {
      tool_answer: answer,
      tool_score: answer === null ? null : env.score,
    });
    if (env.done) {
      this.finalAnswer = env.final_answer;
      if (this.finalAnswer !== null) this.envReward = env.score;
      const outOfTurns = env.reason.includes('out_of_turns');
      this.done =
        outOfTurns && s.truncate_status_when_out_of_turns
          ? { status: 'TRUNCATED', reason: 'out_of_turns' }
          : { status: 'COMPLETED', reason: null };
      return false;
    }
    this.lastText = null;
    if (this.stop) return false;
    this.progress.phase = 'observation';
    const obs = await this.acts.renderObservation({
      episode_id: this.id,
      observation: env.observation ?? '',
      tools: this.input.prompt.tools,
      trajectory_ref: gen.trajectory_ref!,
      conventions: prompt.conventions,
    });
    this.trajectory = obs;
    this.stop = obs.stop;
    this.progress.response_len = this.responseLen;
    // An environment that is not done after the last turn: out of turns all the same.
    if (!this.stop && turn === maxTurns) this.stop = { status: 'TRUNCATED', reason: 'out_of_turns' };
    return true;
  }

  /** How the episode ended. A forbidden token is checked once at the end, whatever put it there:
   *  only this episode fails, with the reason. */
  outcome(): { status: EpisodeStatus; reason: string | null } {
    const leaked = !isFailedOrAborted(this.done?.status ?? this.stop?.status)
      ? (this.trajectory?.forbidden ?? null)
      : null;
    if (leaked) return { status: leaked.status, reason: leaked.reason };
    const status = this.done?.status ?? this.stop?.status ?? 'FAILED';
    return { status, reason: this.done ? this.done.reason : (this.stop?.reason ?? 'no turns') };
  }
}

async function rewardOf(
  input: EpisodeInput,
  turns: Turns,
  status: EpisodeStatus,
  acts: EpisodeActivities,
): Promise<number> {
  const s = input.settings;
  if (isFailedOrAborted(status)) return 0;
  if (turns.envReward !== null) return turns.envReward;
  const scored = await acts.scoreEpisode({
    label: input.label,
    tolerance: s.reward_tolerance,
    match: s.reward_match,
    final_answer: turns.finalAnswer,
    response_text: turns.finalAnswer === null ? turns.lastText : null,
    environment: s.environment,
  });
  return scored.reward;
}

export async function episode(input: EpisodeInput): Promise<EpisodeSummary> {
  const id = episodeId(input);
  const s = input.settings;
  const acts = activitiesFor(input);
  const progress: EpisodeProgress = {
    episode_id: id,
    phase: 'render',
    turn: 0,
    response_len: 0,
    budget: 0,
    status: null,
  };
  setHandler(episodeProgressQuery, () => progress);
  const turns = new Turns(id, input, acts, progress);
  try {
    if (s.python_env?.kind === 'openenv')
      await playOpenEnvEpisode(id, workflowInfo().workflowId, input, turns, acts, progress);
    else if (s.python_env) await playPythonEpisode(id, workflowInfo().workflowId, input, turns, acts, progress);
    else await turns.play();
  } catch (err) {
    if (isCancellation(err)) throw err;
    // Only non-retryable failures (or exhausted retries) land here: the episode is FAILED, and its
    // partial sample is still stored so the audit shows what happened.
    turns.stop = { status: 'FAILED', reason: failureReason(err) };
  }
  const { status, reason } = turns.outcome();
  progress.phase = 'score';
  const reward = await rewardOf(input, turns, status, acts);
  progress.phase = 'store';
  const truncated_reason = status === 'COMPLETED' ? null : reason;
  const { sample_ref } = await acts.storeSample({
    episode_id: id,
    run_id: input.run_id,
    step: input.step,
    prompt_index: input.prompt_index,
    sample_index: input.sample_index,
    prompt_ref: turns.prompt?.prompt_ref ?? null,
    trajectory_ref: turns.trajectory?.trajectory_ref ?? null,
    limits: { max_response_len: s.max_response_len, max_context_len: s.max_context_len },
    turns: turns.recipe,
    images: turns.prompt?.image_refs ?? [],
    reward,
    status,
    truncated_reason,
    temperature: s.temperature,
    label: input.label,
    environment: s.environment,
    blob_store: input.blob_store,
  });
  Object.assign(progress, { phase: 'done', status });
  const summary: EpisodeSummary = {
    episode_id: id,
    sample_ref,
    reward,
    status,
    truncated_reason,
    response_len: turns.responseLen,
    turns: turns.recipe.length,
    weight_version: input.weight_version,
    ...toolSummaryOf(turns.recipe),
  };
  if (input.report_to) {
    try {
      await getExternalWorkflowHandle(input.report_to).signal(episodeDoneSignal, summary);
    } catch {
      // The run is closed (stopped, failed): its continuation reads the stored sample instead.
    }
  }
  return summary;
}
