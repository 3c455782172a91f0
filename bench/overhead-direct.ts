// bench/overhead.ts's direct path: one episode as workflows/episode.ts runs it, but with the activity
// functions called in this process (no Temporal): renderPrompt → per turn generateTurn → envStep →
// renderObservation … → (scoreEpisode) → storeSample, the token stitching by the same lib/trajectory.ts.
// Each call runs in a fresh MockActivityEnvironment (generateTurn reads Context: attempt, heartbeats,
// its start-to-close timeout). No retries: an activity error ends the episode FAILED (counted; a
// healthy run has none). Keep in step with workflows/episode.ts (its control flow is copied here).
import { MockActivityEnvironment } from '@temporalio/testing';
import type { RolloutActivities } from '../activities/index.js';
import type { SampleTurnRecipe } from '../activities/sample.js';
import { appendGenerated, appendObservation, forbiddenResponseTokens, remainingBudget, startTrajectory, type EpisodeStatus, type Stop, type Trajectory } from '../lib/trajectory.js';
import { decode, EngineDouble, toolCall } from '../tests/ts/support/episode-engine-double.js';
import { episodeId, toolSummaryOf, turnSeed, type EpisodeInput, type EpisodeSummary } from '../workflows/episode-messages.js';

/** Per activity type: calls and milliseconds inside the activity function. */
export type ActivityTimes = Map<string, { n: number; ms: number }>;

type Acts = Pick<RolloutActivities, 'renderPrompt' | 'generateTurn' | 'envStep' | 'renderObservation' | 'scoreEpisode' | 'storeSample'>;

export async function directEpisode(acts: Acts, input: EpisodeInput, times?: ActivityTimes): Promise<EpisodeSummary> {
  const s = input.settings;
  const id = episodeId(input);
  const call = async <A, R>(name: keyof Acts, fn: (a: A) => Promise<R>, arg: A, timeoutS: number): Promise<R> => {
    const env = new MockActivityEnvironment({ activityType: name, attempt: 1, startToCloseTimeoutMs: timeoutS * 1000, heartbeatTimeoutMs: name === 'generateTurn' ? 15_000 : undefined, heartbeatDetails: undefined });
    const t0 = performance.now();
    try {
      return await env.run(fn as never, arg as never) as R;
    } finally {
      if (times) {
        const t = times.get(name) ?? { n: 0, ms: 0 };
        times.set(name, { n: t.n + 1, ms: t.ms + performance.now() - t0 });
      }
    }
  };
  const quick = 30;

  let traj: Trajectory | null = null;
  let stop: Stop | null = null;
  let done: { status: EpisodeStatus; reason: string | null } | null = null;
  let finalAnswer: string | null = null;
  let envReward: number | null = null;
  let lastText: string | null = null;
  const recipe: SampleTurnRecipe[] = [];
  let prompt: Awaited<ReturnType<Acts['renderPrompt']>> | null = null;
  try {
    prompt = await call('renderPrompt', acts.renderPrompt, { episode_id: id, messages: input.prompt.messages, tools: s.multi_turn ? input.prompt.tools : [] }, quick);
    traj = startTrajectory(prompt.prompt_len, s);
    const maxTurns = s.multi_turn ? s.max_turns : 1;
    for (let turn = 1; turn <= maxTurns && !stop && !done; turn++) {
      const maxTokens = remainingBudget(traj);
      if (maxTokens < 1) {
        stop = { status: 'TRUNCATED', reason: 'budget_exhausted' };
        break;
      }
      const gen = await call('generateTurn', acts.generateTurn, {
        episode_id: id, turn, prompt_ref: prompt.prompt_ref, response_ids: traj.response_ids,
        sampling: { max_tokens: maxTokens, temperature: s.temperature, top_p: s.top_p, seed: turnSeed(s.seed, id, turn), stop: s.stop, ...(s.allowed_token_ids ? { allowed_token_ids: s.allowed_token_ids } : {}) },
        expected_weight_version: input.weight_version,
      }, s.generate_timeout_s);
      lastText = gen.text;
      recipe.push({ output_ref: gen.output_ref, observation_ids: null, engine: gen.engine, weight_version: gen.weight_version, finish_reason: gen.finish_reason, ...(s.multi_turn ? { tool_answer: null, tool_score: null } : {}) });
      stop = appendGenerated(traj, gen, prompt.conventions);
      const completeWithoutEos = s.multi_turn && stop?.reason === 'no_budget_for_eos';
      if (stop && !completeWithoutEos) break;
      if (!s.multi_turn) {
        done = { status: 'COMPLETED', reason: null };
        break;
      }
      const env = await call('envStep', acts.envStep, { environment: s.environment, text: gen.text, label: input.label, turn, max_turns: maxTurns, tolerance: s.reward_tolerance, match: s.reward_match }, quick);
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
      const obs = await call('renderObservation', acts.renderObservation, { episode_id: id, observation: env.observation ?? '', tools: input.prompt.tools }, quick);
      stop = appendObservation(traj, obs.token_ids, prompt.conventions);
      if (!stop) recipe[recipe.length - 1]!.observation_ids = obs.token_ids;
      if (!stop && turn === maxTurns) stop = { status: 'TRUNCATED', reason: 'out_of_turns' };
    }
  } catch (err) {
    stop = { status: 'FAILED', reason: (err as Error)?.message ?? String(err) };
  }

  const failedOrAborted = (st: EpisodeStatus | undefined) => st === 'FAILED' || st === 'ABORTED';
  const leaked = traj && prompt && !failedOrAborted(done?.status ?? stop?.status) ? forbiddenResponseTokens(traj, prompt.conventions) : null;
  if (leaked) {
    done = null;
    stop = leaked;
  }
  const status = done?.status ?? stop?.status ?? 'FAILED';
  const reason = done ? done.reason : (stop?.reason ?? 'no turns');
  const scored = failedOrAborted(status)
    ? { reward: 0 }
    : envReward !== null && (s.reward_fn ?? 'math') === 'math'
      ? { reward: envReward }
      : await call('scoreEpisode', acts.scoreEpisode, { reward_fn: s.reward_fn ?? 'math', label: input.label, tolerance: s.reward_tolerance, match: s.reward_match, final_answer: finalAnswer, response_text: finalAnswer === null ? lastText : null }, quick);
  const { sample_ref } = await call('storeSample', acts.storeSample, {
    episode_id: id, run_id: input.run_id, step: input.step, prompt_index: input.prompt_index, sample_index: input.sample_index,
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
    expected: { response_len: traj?.response_ids.length ?? 0, mask_sum: traj?.loss_mask.reduce((a, b) => a + b, 0) ?? 0 },
    blob_root: input.blob_root,
  }, quick);
  return {
    episode_id: id, sample_ref, reward: scored.reward, status,
    truncated_reason: status === 'COMPLETED' ? null : reason,
    response_len: traj?.response_ids.length ?? 0,
    turns: recipe.length,
    weight_version: input.weight_version,
    ...toolSummaryOf(recipe),
  };
}

/** The no-op engine of part (b): the tests' EngineDouble answering at once; turn 1 a wrong calc_score
 *  call, turn 2 (after the environment's "incorrect") \boxed{60}. */
export function noOpEngine(): EngineDouble {
  return new EngineDouble((req) => (decode(req.token_ids).includes('incorrect') ? { text: 'then it is \\boxed{60}' } : { text: toolCall('7') }));
}

export const NO_OP_IMAGE_PROCESSOR = { patch_size: 16, merge_size: 2, min_pixels: 1024, max_pixels: 16384 }; // 64×64 → 4 tokens
