// bench/overhead.ts's direct path: one episode as workflows/episode.ts runs it, but with the activity
// functions called in this process (no Temporal): renderPrompt → per turn generateTurn → envStep →
// renderObservation … → (scoreEpisode) → storeSample, the tokens stitched by the activities as in a
// workflow. Each call runs in a fresh MockActivityEnvironment (generateTurn reads Context: attempt,
// heartbeats, its start-to-close timeout). No retries: an activity error ends the episode FAILED
// (counted; a healthy run has none). Keep in step with workflows/episode.ts (its control flow is copied here).
import { MockActivityEnvironment } from '@temporalio/testing';
import { responseBudget, type EpisodeStatus, type Stop } from '../lib/trajectory.js';
import type {
  EnvStepActivityResult,
  GenerateTurnResult,
  RenderObservationResult,
  RolloutActivities,
  SampleTurn,
  TrajectoryStep,
} from '../protocol/activities.js';
import { decode, EngineDouble, toolCall } from '../testing/episode-engine-double.js';
import { episodeId, toolSummaryOf, type EpisodeInput, type EpisodeSummary } from '../protocol/episode.js';
import { turnRequest } from '../workflows/turn-request.js';

/** Per activity type: calls and milliseconds inside the activity function. */
export type ActivityTimes = Map<string, { n: number; ms: number }>;

/** The episode's activities, as the workflow calls them. */
export type DirectActivities = Pick<
  RolloutActivities,
  'renderPrompt' | 'generateTurn' | 'envStep' | 'renderObservation' | 'scoreEpisode' | 'storeSample'
>;
type Acts = DirectActivities;

/** `context: false`: the activities are called as plain functions (they read no activity Context). */
export async function directEpisode(
  acts: Acts,
  input: EpisodeInput,
  times?: ActivityTimes,
  opts: { context?: boolean } = {},
): Promise<EpisodeSummary> {
  const s = input.settings;
  const id = episodeId(input);
  const call = async <A, R>(name: keyof Acts, fn: (a: A) => Promise<R>, arg: A, timeoutS: number): Promise<R> => {
    if (opts.context === false) return timed(name, () => fn(arg));
    const env = new MockActivityEnvironment({
      activityType: name,
      attempt: 1,
      startToCloseTimeoutMs: timeoutS * 1000,
      heartbeatTimeoutMs: name === 'generateTurn' ? 15_000 : undefined,
      heartbeatDetails: undefined,
    });
    return timed(name, async () => (await env.run(fn as never, arg as never)) as R);
  };
  async function timed<R>(name: string, run: () => Promise<R>): Promise<R> {
    const t0 = performance.now();
    try {
      return await run();
    } finally {
      if (times) {
        const t = times.get(name) ?? { n: 0, ms: 0 };
        times.set(name, { n: t.n + 1, ms: t.ms + performance.now() - t0 });
      }
    }
  }
  const quick = 30;
  const limits = { max_response_len: s.max_response_len, max_context_len: s.max_context_len };

  let traj: TrajectoryStep | null = null;
  let stop: Stop | null = null;
  let done: { status: EpisodeStatus; reason: string | null } | null = null;
  let finalAnswer: string | null = null;
  let envReward: number | null = null;
  let lastText: string | null = null;
  let envState = input.env_state;
  const recipe: SampleTurn[] = [];
  let prompt: Awaited<ReturnType<Acts['renderPrompt']>> | null = null;
  try {
    prompt = await call(
      'renderPrompt',
      acts.renderPrompt,
      { episode_id: id, messages: input.prompt.messages, tools: s.multi_turn ? input.prompt.tools : [] },
      quick,
    );
    const budget = responseBudget(prompt.prompt_len, s.max_response_len, s.max_context_len);
    const maxTurns = s.multi_turn ? s.max_turns : 1;
    for (let turn = 1; turn <= maxTurns && !stop && !done; turn++) {
      const maxTokens = budget - (traj?.response_len ?? 0);
      if (maxTokens < 1) {
        stop = { status: 'TRUNCATED', reason: 'budget_exhausted' };
        break;
      }
      const gen: GenerateTurnResult = await call(
        'generateTurn',
        acts.generateTurn,
        turnRequest(input, id, turn, prompt, traj?.trajectory_ref ?? null, maxTokens),
        s.generate_timeout_s,
      );
      lastText = gen.text;
      recipe.push({
        engine: gen.engine,
        weight_version: gen.weight_version,
        finish_reason: gen.finish_reason,
        ...(s.multi_turn ? { tool_answer: null, tool_score: null } : {}),
      });
      traj = gen;
      stop = gen.stop;
      const completeWithoutEos = s.multi_turn && stop?.reason === 'no_budget_for_eos';
      if (stop && !completeWithoutEos) break;
      if (!s.multi_turn) {
        done = { status: 'COMPLETED', reason: null };
        break;
      }
      const env: EnvStepActivityResult = await call(
        'envStep',
        acts.envStep,
        {
          environment: s.environment,
          text: gen.text,
          label: input.label,
          turn,
          max_turns: maxTurns,
          tolerance: s.reward_tolerance,
          match: s.reward_match,
          ...(envState !== undefined ? { state: envState } : {}),
        },
        quick,
      );
      if (env.state !== undefined) envState = env.state;
      const answer = env.tool_call && !env.tool_call.error ? env.tool_call.answer : null;
      Object.assign(recipe[recipe.length - 1]!, {
        tool_answer: answer,
        tool_score: answer === null ? null : env.score,
      });
      if (env.done) {
        finalAnswer = env.final_answer;
        if (finalAnswer !== null) envReward = env.score;
        const outOfTurns = env.reason.includes('out_of_turns');
        done =
          outOfTurns && s.truncate_status_when_out_of_turns
            ? { status: 'TRUNCATED', reason: 'out_of_turns' }
            : { status: 'COMPLETED', reason: null };
        break;
      }
      lastText = null;
      if (stop) break;
      const obs: RenderObservationResult = await call(
        'renderObservation',
        acts.renderObservation,
        {
          episode_id: id,
          observation: env.observation ?? '',
          tools: input.prompt.tools,
          trajectory_ref: gen.trajectory_ref!,
          conventions: prompt.conventions,
        },
        quick,
      );
      traj = obs;
      stop = obs.stop;
      if (!stop && turn === maxTurns) stop = { status: 'TRUNCATED', reason: 'out_of_turns' };
    }
  } catch (err) {
    stop = { status: 'FAILED', reason: (err as Error)?.message ?? String(err) };
  }

  const failedOrAborted = (st: EpisodeStatus | undefined) => st === 'FAILED' || st === 'ABORTED';
  const leaked = !failedOrAborted(done?.status ?? stop?.status) ? (traj?.forbidden ?? null) : null;
  if (leaked) {
    done = null;
    stop = leaked;
  }
  const status = done?.status ?? stop?.status ?? 'FAILED';
  const reason = done ? done.reason : (stop?.reason ?? 'no turns');
  const scored = failedOrAborted(status)
    ? { reward: 0 }
    : envReward !== null
      ? { reward: envReward }
      : await call(
          'scoreEpisode',
          acts.scoreEpisode,
          {
            label: input.label,
            tolerance: s.reward_tolerance,
            match: s.reward_match,
            final_answer: finalAnswer,
            response_text: finalAnswer === null ? lastText : null,
            environment: s.environment,
          },
          quick,
        );
  const { sample_ref } = await call(
    'storeSample',
    acts.storeSample,
    {
      episode_id: id,
      run_id: input.run_id,
      step: input.step,
      prompt_index: input.prompt_index,
      sample_index: input.sample_index,
      prompt_ref: prompt?.prompt_ref ?? null,
      trajectory_ref: traj?.trajectory_ref ?? null,
      limits,
      turns: recipe,
      images: prompt?.image_refs ?? [],
      reward: scored.reward,
      status,
      truncated_reason: status === 'COMPLETED' ? null : reason,
      temperature: s.temperature,
      label: input.label,
      environment: s.environment,
      blob_store: input.blob_store,
    },
    quick,
  );
  return {
    episode_id: id,
    sample_ref,
    reward: scored.reward,
    status,
    truncated_reason: status === 'COMPLETED' ? null : reason,
    response_len: traj?.response_len ?? 0,
    turns: recipe.length,
    weight_version: input.weight_version,
    ...toolSummaryOf(recipe),
  };
}

/** The no-op engine of part (b): the tests' EngineDouble answering at once; turn 1 a wrong calc_score
 *  call, turn 2 (after the environment's "incorrect") \boxed{60}. */
/** `latencyMs` [lo, hi]: each turn answers after lo…hi ms, the same for the same request seed (so the
 *  workflow and the direct loop wait alike): a GPU engine's time without its compute. The child worker
 *  (bench/overhead-worker.ts) reads it from BENCH_ENGINE_LATENCY_MS ("lo-hi"). */
export function noOpEngine(latencyMs = latencyFromEnv()): EngineDouble {
  const engine = new EngineDouble((req) =>
    decode(req.token_ids).includes('incorrect') ? { text: 'then it is \\boxed{60}' } : { text: toolCall('7') },
  );
  if (!latencyMs) return engine;
  const [lo, hi] = latencyMs;
  const generate = engine.generate.bind(engine);
  engine.generate = async (req) => {
    await new Promise((r) => setTimeout(r, lo + (Math.abs(req.sampling.seed ?? 0) % (hi - lo + 1))));
    return generate(req);
  };
  return engine;
}

function latencyFromEnv(): [number, number] | undefined {
  const m = /^(\d+)-(\d+)$/.exec(process.env.BENCH_ENGINE_LATENCY_MS ?? '');
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

export const NO_OP_IMAGE_PROCESSOR = { patch_size: 16, merge_size: 2, min_pixels: 1024, max_pixels: 16384 }; // 64×64 → 4 tokens
