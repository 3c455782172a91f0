// Step "score": the default math RM on the episode's final answer (binary 0/1). Unreadable answers
// score 0 with a reason; they are results, not failures.
import { gradeAnswer, scoreResponse } from '../lib/math/reward.js';

export interface ScoreInput {
  /** Default 'math'. */
  reward_fn?: 'math' | 'target_fraction';
  label: string;
  tolerance: number;
  /** The answer the environment ended with (tool call, \boxed{} or last line). */
  final_answer: string | null;
  /** Without a final answer: the response text whose last \boxed{} is graded (single-turn mode). */
  response_text: string | null;
}

export interface ScoreResult {
  reward: number;
  extracted: string | null;
  reason: string;
}

export async function scoreEpisode(input: ScoreInput): Promise<ScoreResult> {
  if (input.reward_fn === 'target_fraction') return targetFraction(input.response_text ?? input.final_answer ?? '', input.label);
  const opts = { tolerance: input.tolerance };
  if (input.final_answer !== null) return { ...gradeAnswer(input.final_answer, input.label, opts), extracted: input.final_answer };
  if (input.response_text !== null) return scoreResponse(input.response_text, input.label, opts);
  return { reward: 0, extracted: null, reason: 'no answer' };
}

/**
 * A dense synthetic reward: the share of the response's characters that equal the label (one
 * character). With sampling restricted to single-character tokens this is the share of tokens.
 */
export function targetFraction(text: string, label: string): ScoreResult {
  if (label.length !== 1) return { reward: 0, extracted: null, reason: `target_fraction needs a one-character label, got ${JSON.stringify(label)}` };
  const chars = [...text];
  if (!chars.length) return { reward: 0, extracted: '', reason: 'empty response' };
  const hits = chars.filter((c) => c === label).length;
  return { reward: hits / chars.length, extracted: text, reason: `${hits}/${chars.length} characters equal ${JSON.stringify(label)}` };
}
