// Step "score": the environment's reward of an episode that its steps did not grade. The environment's
// grade (the default math RM for geo3k and arithmetic) of the episode's final answer, or of the
// response's last \boxed{} (binary 0/1); an environment that reads the whole response instead
// (Environment.scoreResponse) gives its own reward in [0, 1]. Unreadable answers score 0 with a
// reason; they are results, not failures. A label that cannot be graded against (empty) fails the
// activity without retries: it is the data's fault, and must never train as a 0.
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { getEnvironment } from '../lib/env/registry.js';
import type { Environment } from '../lib/env/types.js';
import { checkLabel, findLastBoxed, gradeAnswer, LabelError, REWARD_MATCHES } from '../lib/math/reward.js';
import type { ScoreInput, ScoreResult } from '../protocol/activities.js';

const ScoreInputSchema = z.object({
  label: z.string(),
  tolerance: z.number().nonnegative(),
  match: z.enum(REWARD_MATCHES).optional(),
  final_answer: z.string().nullable(),
  response_text: z.string().nullable(),
  environment: z.string().optional(),
});

/** How an environment scores: its grade of an answer, and its reward of a whole response if it has one. */
type Scorer = Pick<Environment, 'grade' | 'scoreResponse'>;
const MATH_RM: Scorer = { grade: async (answer, label, opts) => gradeAnswer(answer, label, opts) };

export async function scoreEpisode(raw: ScoreInput): Promise<ScoreResult> {
  const parsed = ScoreInputSchema.safeParse(raw);
  if (!parsed.success)
    throw ApplicationFailure.nonRetryable(
      `score: invalid input: ${z.prettifyError(parsed.error)}`,
      'InvalidScoreInput',
    );
  const input = parsed.data;
  let scorer = MATH_RM;
  if (input.environment !== undefined) {
    try {
      scorer = getEnvironment(input.environment);
    } catch (err) {
      throw ApplicationFailure.nonRetryable(`score: ${(err as Error).message}`, 'UnknownEnvironment');
    }
  }
  try {
    return await reward(input, scorer);
  } catch (err) {
    if (err instanceof LabelError) throw ApplicationFailure.nonRetryable(`score: ${err.message}`, 'InvalidLabel');
    throw err;
  }
}

async function reward(input: ScoreInput, scorer: Scorer): Promise<ScoreResult> {
  checkLabel(input.label);
  const opts = { tolerance: input.tolerance, match: input.match };
  if (input.final_answer !== null)
    return { ...(await scorer.grade(input.final_answer, input.label, opts)), extracted: input.final_answer };
  if (input.response_text === null) return { reward: 0, extracted: null, reason: 'no answer' };
  if (scorer.scoreResponse)
    return { ...(await scorer.scoreResponse(input.response_text, input.label)), extracted: input.response_text };
  const boxed = findLastBoxed(input.response_text);
  if (boxed.kind === 'none') return { reward: 0, extracted: null, reason: 'no \\boxed{} answer' };
  if (boxed.kind === 'unclosed') return { reward: 0, extracted: null, reason: 'unclosed \\boxed{' };
  return { ...(await scorer.grade(boxed.content, input.label, opts)), extracted: boxed.content };
}
