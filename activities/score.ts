// Step "score": the environment's grade (the default math RM for both environments) of the
// episode's final answer, or of the response's last \boxed{} (binary 0/1). Unreadable answers
// score 0 with a reason; they are results, not failures. A label that cannot be graded against
// (empty) fails the activity without retries: it is the data's fault, and must never train as a 0.
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { getEnvironment } from '../lib/env/registry.js';
import type { Environment } from '../lib/env/types.js';
import { checkLabel, findLastBoxed, gradeAnswer, LabelError, REWARD_MATCHES } from '../lib/math/reward.js';
import type { ScoreInput, ScoreResult } from '../protocol/activities.js';

const ScoreInputSchema = z.object({
  reward_fn: z.enum(['math', 'target_fraction']).optional(),
  label: z.string(),
  tolerance: z.number().nonnegative(),
  match: z.enum(REWARD_MATCHES).optional(),
  final_answer: z.string().nullable(),
  response_text: z.string().nullable(),
  environment: z.string().optional(),
});

export async function scoreEpisode(raw: ScoreInput): Promise<ScoreResult> {
  const parsed = ScoreInputSchema.safeParse(raw);
  if (!parsed.success)
    throw ApplicationFailure.nonRetryable(
      `score: invalid input: ${z.prettifyError(parsed.error)}`,
      'InvalidScoreInput',
    );
  const input = parsed.data;
  if (input.reward_fn === 'target_fraction')
    return targetFraction(input.response_text ?? input.final_answer ?? '', input.label);
  let grade: Environment['grade'] = async (answer, label, opts) => gradeAnswer(answer, label, opts);
  if (input.environment !== undefined) {
    try {
      grade = getEnvironment(input.environment).grade;
    } catch (err) {
      throw ApplicationFailure.nonRetryable(`score: ${(err as Error).message}`, 'UnknownEnvironment');
    }
  }
  try {
    return await mathReward(input, grade);
  } catch (err) {
    if (err instanceof LabelError) throw ApplicationFailure.nonRetryable(`score: ${err.message}`, 'InvalidLabel');
    throw err;
  }
}

async function mathReward(input: ScoreInput, grade: Environment['grade']): Promise<ScoreResult> {
  checkLabel(input.label);
  const opts = { tolerance: input.tolerance, match: input.match };
  if (input.final_answer !== null)
    return { ...(await grade(input.final_answer, input.label, opts)), extracted: input.final_answer };
  if (input.response_text === null) return { reward: 0, extracted: null, reason: 'no answer' };
  const boxed = findLastBoxed(input.response_text);
  if (boxed.kind === 'none') return { reward: 0, extracted: null, reason: 'no \\boxed{} answer' };
  if (boxed.kind === 'unclosed') return { reward: 0, extracted: null, reason: 'unclosed \\boxed{' };
  return { ...(await grade(boxed.content, input.label, opts)), extracted: boxed.content };
}

/**
 * A dense synthetic reward: the share of the response's characters that equal the label (one
 * character). With sampling restricted to single-character tokens this is the share of tokens.
 */
export function targetFraction(text: string, label: string): ScoreResult {
  if (label.length !== 1)
    return {
      reward: 0,
      extracted: null,
      reason: `target_fraction needs a one-character label, got ${JSON.stringify(label)}`,
    };
  const chars = [...text];
  if (!chars.length) return { reward: 0, extracted: '', reason: 'empty response' };
  const hits = chars.filter((c) => c === label).length;
  return {
    reward: hits / chars.length,
    extracted: text,
    reason: `${hits}/${chars.length} characters equal ${JSON.stringify(label)}`,
  };
}
