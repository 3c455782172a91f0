// Token-exact stitching of a multi-turn episode ("token in, token out"): decoded text is never
// re-tokenized. Pure and deterministic — the episode workflow imports it.
//
// Response side = generated tokens (mask 1, engine logprobs) + synthetic end-of-turn tokens and
// observation tokens (mask 0, logprob 0). The budget counts every response-side token.
// Every offset is taken from the tokens really appended (vime PR #120 dropped an observation token
// after a synthetic EOS by counting the EOS that was not there).

export type EpisodeStatus = 'COMPLETED' | 'TRUNCATED' | 'ABORTED' | 'FAILED';
export type FinishReason = 'stop' | 'length' | 'abort';

export class TrajectoryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TrajectoryError';
  }
}

export interface TokenConventions {
  /** Token ids that end generation (e.g. <|im_end|>, <|endoftext|>). */
  eos_ids: number[];
  /** The chat template's end-of-turn token (<|im_end|>): the synthetic EOS, and the token that
   *  joins an assistant turn to the next message. */
  end_of_turn_id: number;
  /** Tokens that must never be on the response side (image/video placeholders, vision markers): the
   *  trainer counts placeholders over prompt + response. Absent in conventions recorded before this. */
  forbidden_response_ids?: number[];
}

export interface GeneratedTokens {
  token_ids: number[];
  logprobs: number[];
  finish_reason: string;
}

/** Where one turn's tokens sit in response_ids (offsets are response-relative). */
export interface TurnSpan {
  gen_start: number;
  gen_len: number;
  /** Offset of the synthetic EOS (mask 0), or null when the engine ended with an EOS itself. */
  synthetic_eos_at: number | null;
  obs_start: number | null;
  obs_len: number;
}

export interface Trajectory {
  prompt_len: number;
  budget: number;
  response_ids: number[];
  loss_mask: number[];
  logprobs: number[];
  spans: TurnSpan[];
}

export type Stop =
  | { status: 'TRUNCATED'; reason: string }
  | { status: 'ABORTED'; reason: string }
  | { status: 'FAILED'; reason: string };

export function responseBudget(promptLen: number, maxResponseLen: number, maxContextLen: number): number {
  return Math.max(0, Math.min(maxResponseLen, maxContextLen - promptLen));
}

export function startTrajectory(
  promptLen: number,
  limits: { max_response_len: number; max_context_len: number },
): Trajectory {
  return {
    prompt_len: promptLen,
    budget: responseBudget(promptLen, limits.max_response_len, limits.max_context_len),
    response_ids: [],
    loss_mask: [],
    logprobs: [],
    spans: [],
  };
}

export function remainingBudget(t: Trajectory): number {
  return t.budget - t.response_ids.length;
}

/** vLLM writes this in place of a logprob it could not represent (-inf); it is not a logprob. */
export const VLLM_PLACEHOLDER_LOGPROB = -9999;

/** Strict checks on the engine's answer. Returns a Stop for abort/invalid output, null when usable. */
export function checkGenerated(out: GeneratedTokens, maxTokens: number): Stop | null {
  if (out.finish_reason === 'abort') return { status: 'ABORTED', reason: 'engine_abort' };
  if (out.finish_reason !== 'stop' && out.finish_reason !== 'length')
    return { status: 'FAILED', reason: `unexpected finish reason ${JSON.stringify(out.finish_reason)}` };
  if (out.token_ids.length === 0)
    return { status: 'FAILED', reason: `empty generation (finish reason ${out.finish_reason}, no tokens)` };
  if (out.token_ids.length !== out.logprobs.length)
    return { status: 'FAILED', reason: `${out.token_ids.length} tokens but ${out.logprobs.length} logprobs` };
  if (out.token_ids.length > maxTokens)
    return { status: 'FAILED', reason: `${out.token_ids.length} tokens generated, budget was ${maxTokens}` };
  const badId = out.token_ids.findIndex((id) => !Number.isInteger(id) || id < 0);
  if (badId >= 0) return { status: 'FAILED', reason: `invalid token id ${out.token_ids[badId]} at ${badId}` };
  const badLp = out.logprobs.findIndex((lp) => !Number.isFinite(lp) || lp > 0 || lp <= VLLM_PLACEHOLDER_LOGPROB);
  if (badLp >= 0)
    return {
      status: 'FAILED',
      reason: `invalid logprob ${out.logprobs[badLp]} for token ${badLp} (vLLM's ${VLLM_PLACEHOLDER_LOGPROB} placeholder is not a logprob)`,
    };
  return null;
}

/** The ids whose text the environment reads: the generation without its trailing EOS token(s). */
export function idsForText(tokenIds: number[], eosIds: number[]): number[] {
  let end = tokenIds.length;
  while (end > 0 && eosIds.includes(tokenIds[end - 1]!)) end--;
  return tokenIds.slice(0, end);
}

/**
 * A response-side image/vision token (sampled by the model, or from an observation) makes the
 * episode FAILED: the trainer would refuse the whole batch over it.
 */
export function forbiddenResponseTokens(t: Trajectory, tok: TokenConventions): Stop | null {
  const forbidden = tok.forbidden_response_ids ?? [];
  const at = t.response_ids.findIndex((id) => forbidden.includes(id));
  if (at < 0) return null;
  const n = t.response_ids.filter((id) => forbidden.includes(id)).length;
  const where = t.loss_mask[at] === 1 ? 'generated' : 'observation';
  return {
    status: 'FAILED',
    reason: `response has ${n} image/vision placeholder token(s) (first: id ${t.response_ids[at]} at response offset ${at}, ${where}); the trainer counts placeholders over prompt + response`,
  };
}

function push(t: Trajectory, ids: number[], mask: 0 | 1, logprobs: number[] | null): void {
  for (let i = 0; i < ids.length; i++) {
    t.response_ids.push(ids[i]!);
    t.loss_mask.push(mask);
    t.logprobs.push(logprobs ? logprobs[i]! : 0);
  }
}

/**
 * Appends one validated generation (mask 1). After a stop-string finish whose last token is not an
 * EOS, appends one synthetic end-of-turn token (mask 0, logprob 0). Returns a Stop when the episode
 * cannot continue (length finish → budget exhausted; no room for the synthetic EOS).
 */
export function appendGenerated(t: Trajectory, out: GeneratedTokens, tok: TokenConventions): Stop | null {
  const maxTokens = remainingBudget(t);
  const bad = checkGenerated(out, maxTokens);
  if (bad) return bad;
  const span: TurnSpan = {
    gen_start: t.response_ids.length,
    gen_len: out.token_ids.length,
    synthetic_eos_at: null,
    obs_start: null,
    obs_len: 0,
  };
  push(t, out.token_ids, 1, out.logprobs);
  t.spans.push(span);
  if (out.finish_reason === 'length') return { status: 'TRUNCATED', reason: 'budget_exhausted' };
  const last = out.token_ids[out.token_ids.length - 1];
  if (last !== undefined && tok.eos_ids.includes(last)) return null;
  if (remainingBudget(t) < 1) return { status: 'TRUNCATED', reason: 'no_budget_for_eos' };
  span.synthetic_eos_at = t.response_ids.length;
  push(t, [tok.end_of_turn_id], 0, null);
  return null;
}

/**
 * Appends an observation (mask 0). `suffix` is the template's tokens for the new user message,
 * starting with the end-of-turn token that closes the previous assistant turn; that token is
 * dropped when the trajectory already ends with it, so it is never doubled.
 */
export function appendObservation(t: Trajectory, suffix: number[], tok: TokenConventions): Stop | null {
  if (suffix[0] !== tok.end_of_turn_id)
    throw new TrajectoryError('observation suffix must start with the end-of-turn token');
  const lastId = t.response_ids[t.response_ids.length - 1];
  const ids = lastId === tok.end_of_turn_id ? suffix.slice(1) : suffix;
  if (ids.length > remainingBudget(t)) return { status: 'TRUNCATED', reason: 'observation_exceeds_budget' };
  const span = t.spans[t.spans.length - 1];
  if (!span || span.obs_start !== null) throw new TrajectoryError('an observation must follow a generated turn');
  span.obs_start = t.response_ids.length;
  span.obs_len = ids.length;
  push(t, ids, 0, null);
  return null;
}

export interface InvariantReport {
  ok: boolean;
  response_length: number;
  loss_mask_length: number;
  logprobs_length: number;
  mask_sum: number;
  problems: string[];
}

/** The sample invariants of docs/CONTRACTS.md (plus the budget). */
export function checkInvariants(
  s: { response_ids: number[]; loss_mask: number[]; rollout_logprobs: number[] },
  budget?: number,
): InvariantReport {
  const problems: string[] = [];
  const n = s.response_ids.length;
  if (s.loss_mask.length !== n) problems.push(`loss_mask has ${s.loss_mask.length} entries, response ${n}`);
  if (s.rollout_logprobs.length !== n)
    problems.push(`rollout_logprobs has ${s.rollout_logprobs.length} entries, response ${n}`);
  s.loss_mask.forEach((m, i) => {
    if (m !== 0 && m !== 1) problems.push(`loss_mask[${i}] = ${m}`);
    else if (m === 0 && s.rollout_logprobs[i] !== 0)
      problems.push(`rollout_logprobs[${i}] = ${s.rollout_logprobs[i]} under mask 0`);
  });
  if (budget !== undefined && n > budget) problems.push(`response of ${n} tokens exceeds the budget ${budget}`);
  const mask_sum = s.loss_mask.reduce((a, b) => a + b, 0);
  return {
    ok: problems.length === 0,
    response_length: n,
    loss_mask_length: s.loss_mask.length,
    logprobs_length: s.rollout_logprobs.length,
    mask_sum,
    problems: problems.slice(0, 20),
  };
}

/** The masked (mask 0) runs of a response as [start, end) pairs. */
export function maskedSpans(lossMask: number[]): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let start = -1;
  for (let i = 0; i <= lossMask.length; i++) {
    const masked = i < lossMask.length && lossMask[i] === 0;
    if (masked && start < 0) start = i;
    if (!masked && start >= 0) {
      out.push([start, i]);
      start = -1;
    }
  }
  return out;
}

/**
 * The observation suffix from two renders of a fixed conversation: `prefix` (ending with an
 * assistant turn) and `extended` (the same plus the observation as a user message and the
 * generation prompt). Fails loudly when the template is not prefix-stable.
 */
/**
 * The special tokens of an observation suffix must be exactly the template's own (those of the same
 * suffix around a harmless observation): text from the environment never becomes special tokens.
 */
export function checkObservationSpecials(suffix: number[], skeleton: number[], specialIds: number[]): void {
  const specials = (ids: number[]) => ids.filter((id) => specialIds.includes(id));
  const got = specials(suffix);
  const want = specials(skeleton);
  if (got.length !== want.length || got.some((id, i) => id !== want[i]))
    throw new TrajectoryError(
      `observation tokens hold special tokens the template did not write: [${got.join(', ')}], template structure [${want.join(', ')}]`,
    );
}

export function observationSuffix(prefix: number[], extended: number[], endOfTurnId: number): number[] {
  if (extended.length <= prefix.length || prefix.some((id, i) => extended[i] !== id))
    throw new TrajectoryError(
      'chat template is not prefix-stable: the render without the observation is not a prefix of the render with it',
    );
  const eot = prefix.lastIndexOf(endOfTurnId);
  if (eot < 0) throw new TrajectoryError('the prefix conversation has no end-of-turn token');
  return extended.slice(eot);
}
