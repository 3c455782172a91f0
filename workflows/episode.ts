// The episode workflow (docs/ARCHITECTURE.md "Episode"): render once, then per turn generate →
// stitch → env step → observation, then score and store the sample. Deterministic: all I/O is in
// activities; the token stitching is the pure lib/trajectory.ts.
import { ActivityFailure, ApplicationFailure, getExternalWorkflowHandle, isCancellation, patched, proxyActivities, proxyLocalActivities, setHandler } from '@temporalio/workflow';
import type { RolloutActivities } from '../activities/index.js';
import type { SampleTurnRecipe } from '../activities/sample.js';
import { appendGenerated, appendObservation, forbiddenResponseTokens, remainingBudget, startTrajectory, type EpisodeStatus, type Stop, type Trajectory } from '../lib/trajectory.js';
import { episodeDoneSignal, episodeId, episodeProgressQuery, toolSummaryOf, turnSeed, type EpisodeInput, type EpisodeProgress, type EpisodeSummary } from './episode-messages.js';

// Gated so that histories recorded before it (a score activity after every episode) still replay.
const ENV_GRADE_IS_THE_REWARD = 'env-grade-is-the-reward';
// The quick steps run as local activities: in the workflow task that follows a generate, with their
// results recorded as markers, so a turn costs one activity and one workflow task instead of three
// of each (bench/overhead.ts). Gated so that histories recorded with them as activities still replay.
const LOCAL_QUICK_STEPS = 'local-quick-steps';

const NON_RETRYABLE = ['ImagePlaceholderMismatch', 'TemplateNotPrefixStable', 'EngineRequestRejected', 'InvalidEngineAnswer', 'UnknownEnvironment', 'SampleMismatch', 'InvalidSampleRecipe', 'ObservationSpecialTokens'];

const QUICK_RETRY = { initialInterval: '1 second', maximumInterval: '10 seconds', maximumAttempts: 5, nonRetryableErrorTypes: NON_RETRYABLE };

function activitiesFor(input: EpisodeInput) {
  const quick = patched(LOCAL_QUICK_STEPS)
    ? proxyLocalActivities<RolloutActivities>({ startToCloseTimeout: '30 seconds', retry: QUICK_RETRY })
    : proxyActivities<RolloutActivities>({
        // These take milliseconds; a task lost on its way to a worker is only noticed at this timeout (a
        // demo's step once waited out 2 minutes for one storeSample), so keep it short.
        startToCloseTimeout: '30 seconds',
        retry: QUICK_RETRY,
      });
  const generate = proxyActivities<RolloutActivities>({
    startToCloseTimeout: `${input.settings.generate_timeout_s} seconds`,
    // A killed worker or a dead engine is noticed within this, and the retry goes to another engine.
    heartbeatTimeout: '15 seconds',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '20 seconds', maximumAttempts: 8, nonRetryableErrorTypes: NON_RETRYABLE },
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

function failureReason(err: unknown): string {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure) return `${cause.type ?? 'error'}: ${cause.message}`;
  return (cause as Error)?.message ?? String(cause);
}

function isFailedOrAborted(status: EpisodeStatus | undefined): boolean {
  return status === 'FAILED' || status === 'ABORTED';
}

export async function episode(input: EpisodeInput): Promise<EpisodeSummary> {
  const id = episodeId(input);
  const s = input.settings;
  const acts = activitiesFor(input);
  const progress: EpisodeProgress = { episode_id: id, phase: 'render', turn: 0, response_len: 0, budget: 0, status: null };
  setHandler(episodeProgressQuery, () => progress);

  let traj: Trajectory | null = null;
  let stop: Stop | null = null;
  let done: { status: EpisodeStatus; reason: string | null } | null = null;
  let finalAnswer: string | null = null;
  // The environment's grade of its final answer: the same grader the score step runs, so it is the reward.
  let envReward: number | null = null;
  // The last turn's text, graded (its \boxed{}) when the episode ends without a final answer; null
  // once the environment has answered that turn (a rejected tool call does not score by its \boxed{}).
  let lastText: string | null = null;
  // The environment's per-episode state, as its last step returned it (absent: inputs made before
  // environments kept state; the activity then starts from the environment's initial state).
  let envState = input.env_state;
  const recipe: SampleTurnRecipe[] = [];
  let prompt: Awaited<ReturnType<typeof acts.renderPrompt>> | null = null;

  try {
    prompt = await acts.renderPrompt({ episode_id: id, messages: input.prompt.messages, tools: s.multi_turn ? input.prompt.tools : [] });
    traj = startTrajectory(prompt.prompt_len, s);
    progress.budget = traj.budget;
    const maxTurns = s.multi_turn ? s.max_turns : 1;
    for (let turn = 1; turn <= maxTurns && !stop && !done; turn++) {
      const maxTokens = remainingBudget(traj);
      if (maxTokens < 1) {
        stop = { status: 'TRUNCATED', reason: 'budget_exhausted' };
        break;
      }
      Object.assign(progress, { phase: 'generate', turn });
      const gen = await acts.generateTurn({
        episode_id: id,
        turn,
        prompt_ref: prompt.prompt_ref,
        response_ids: traj.response_ids,
        sampling: { max_tokens: maxTokens, temperature: s.temperature, top_p: s.top_p, seed: turnSeed(s.seed, id, turn), stop: s.stop, ...(s.allowed_token_ids ? { allowed_token_ids: s.allowed_token_ids } : {}) },
        ...(s.max_staleness
          ? { min_weight_version: input.weight_version, ...(s.sync_in_flight === 'abort' ? { regenerate_aborted: true } : {}) }
          : { expected_weight_version: input.weight_version }),
      });
      lastText = gen.text;
      // null: the engine reported no weight version; recorded as unknown, never assumed.
      recipe.push({ output_ref: gen.output_ref, observation_ids: null, engine: gen.engine, weight_version: gen.weight_version, finish_reason: gen.finish_reason, ...(s.multi_turn ? { tool_answer: null, tool_score: null } : {}) });
      stop = appendGenerated(traj, gen, prompt.conventions);
      progress.response_len = traj.response_ids.length;
      // A turn complete but for the synthetic EOS (its stop string was the last token the budget
      // allowed) still goes to the environment: a correct tool call must count.
      const completeWithoutEos = s.multi_turn && stop?.reason === 'no_budget_for_eos';
      if (stop && !completeWithoutEos) break;
      if (!s.multi_turn) {
        done = { status: 'COMPLETED', reason: null };
        break;
      }
      progress.phase = 'env';
      const env = await acts.envStep({ environment: s.environment, text: gen.text, label: input.label, turn, max_turns: maxTurns, tolerance: s.reward_tolerance, match: s.reward_match, ...(envState !== undefined ? { state: envState } : {}) });
      if (env.state !== undefined) envState = env.state;
      // The answer a tool call gave (calc_score, submit; null: none, another tool, or a malformed call), kept per turn.
      const answer = env.tool_call && !env.tool_call.error ? env.tool_call.answer : null;
      Object.assign(recipe[recipe.length - 1]!, { tool_answer: answer, tool_score: answer === null ? null : env.score });
      if (env.done) {
        finalAnswer = env.final_answer;
        if (finalAnswer !== null) envReward = env.score;
        const outOfTurns = env.reason.includes('out_of_turns');
        done = outOfTurns && s.truncate_status_when_out_of_turns ? { status: 'TRUNCATED', reason: 'out_of_turns' } : { status: 'COMPLETED', reason: null };
        break;
      }
      lastText = null;
      if (stop) break;
      progress.phase = 'observation';
      const obs = await acts.renderObservation({ episode_id: id, observation: env.observation ?? '', tools: input.prompt.tools });
      stop = appendObservation(traj, obs.token_ids, prompt.conventions);
      if (!stop) recipe[recipe.length - 1]!.observation_ids = obs.token_ids;
      progress.response_len = traj.response_ids.length;
      // An environment that is not done after the last turn: out of turns all the same.
      if (!stop && turn === maxTurns) stop = { status: 'TRUNCATED', reason: 'out_of_turns' };
    }
  } catch (err) {
    if (isCancellation(err)) throw err;
    // Only non-retryable failures (or exhausted retries) land here: the episode is FAILED, and its
    // partial sample is still stored so the audit shows what happened.
    stop = { status: 'FAILED', reason: failureReason(err) };
  }

  // Checked once at the end, whatever put them there: only this episode fails, with the reason.
  const leaked = traj && prompt && !isFailedOrAborted(done?.status ?? stop?.status) ? forbiddenResponseTokens(traj, prompt.conventions) : null;
  if (leaked) {
    done = null;
    stop = leaked;
  }
  const status = done?.status ?? stop?.status ?? 'FAILED';
  const reason = done ? done.reason : (stop?.reason ?? 'no turns');
  progress.phase = 'score';
  const scored =
    isFailedOrAborted(status)
      ? { reward: 0 as const, extracted: null, reason: status }
      : envReward !== null && (s.reward_fn ?? 'math') === 'math' && patched(ENV_GRADE_IS_THE_REWARD)
        ? { reward: envReward }
        : await acts.scoreEpisode({ reward_fn: s.reward_fn ?? 'math', label: input.label, tolerance: s.reward_tolerance, match: s.reward_match, final_answer: finalAnswer, response_text: finalAnswer === null ? lastText : null, environment: s.environment });

  progress.phase = 'store';
  const { sample_ref } = await acts.storeSample({
    episode_id: id,
    run_id: input.run_id,
    step: input.step,
    prompt_index: input.prompt_index,
    sample_index: input.sample_index,
    prompt_ref: prompt?.prompt_ref ?? null,
    limits: { max_response_len: s.max_response_len, max_context_len: s.max_context_len },
    conventions: prompt?.conventions ?? null,
    turns: recipe,
    images: prompt?.image_refs ?? [],
    reward: scored.reward,
    status,
    truncated_reason: status === 'COMPLETED' ? null : reason,
    temperature: s.temperature,
    label: input.label,
    environment: s.environment,
    expected: { response_len: traj?.response_ids.length ?? 0, mask_sum: traj?.loss_mask.reduce((a, b) => a + b, 0) ?? 0 },
    blob_store: input.blob_store,
    blob_root: input.blob_root,
  });
  Object.assign(progress, { phase: 'done', status });
  const summary: EpisodeSummary = {
    episode_id: id,
    sample_ref,
    reward: scored.reward,
    status,
    truncated_reason: status === 'COMPLETED' ? null : reason,
    response_len: traj?.response_ids.length ?? 0,
    turns: recipe.length,
    weight_version: input.weight_version,
    ...toolSummaryOf(recipe),
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
