// The Geo3K environment (../shared/DESIGN.md, "Geo3K environment"): the model may check an answer
// with the calc_score tool; a correct answer ends the episode, a wrong one gets feedback until
// max_turns (the last chance asks for the final \boxed{} answer); a turn without a tool call ends
// the episode with its final \boxed{} answer (else its last non-empty line).
import { extractBoxed, gradeAnswer } from '../math/reward.js';
import { lastToolCallBody, parseToolCall } from './tool-call.js';
import type { EnvStepInput, EnvStepResult, Environment, ToolCallReport } from './types.js';

export const CALC_SCORE = 'calc_score';

/** The answer a turn ends with when it has no usable tool call. */
export function finalAnswerOf(text: string): string | null {
  const boxed = extractBoxed(text);
  if (boxed !== null && boxed.trim() !== '') return boxed.trim();
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l.length > 0);
  return lines.length > 0 ? lines[lines.length - 1]! : null;
}

function feedback(message: string, nextIsLast: boolean): string {
  if (!nextIsLast) return `${message} Please try again.`;
  return `${message} This is your last chance: think it through and give your final answer as \\boxed{answer}.`;
}

function ended(text: string, input: EnvStepInput, reason: string, tool_call: ToolCallReport | null): EnvStepResult {
  const final_answer = finalAnswerOf(text);
  const score = final_answer === null ? 0 : gradeAnswer(final_answer, input.label, { tolerance: input.tolerance }).reward;
  return { done: true, score, final_answer, observation: null, tool_call, reason };
}

export function geo3kStep(input: EnvStepInput): EnvStepResult {
  const text = typeof input.text === 'string' ? input.text : '';
  const outOfTurns = input.turn >= input.max_turns;
  const nextIsLast = input.turn + 1 >= input.max_turns;
  const body = lastToolCallBody(text);
  if (body === null) return ended(text, input, 'no_tool_call', null);

  const call = parseToolCall(body);
  if (!call.error && call.name !== CALC_SCORE) call.error = `unknown tool ${JSON.stringify(call.name)}; the only tool is ${CALC_SCORE}`;
  if (call.error) {
    if (outOfTurns) return ended(text, input, 'tool_error_out_of_turns', call);
    return { done: false, score: null, final_answer: null, observation: feedback(`Tool error: ${call.error}.`, nextIsLast), tool_call: call, reason: 'tool_error' };
  }
  const answer = call.answer!;
  const grade = gradeAnswer(answer, input.label, { tolerance: input.tolerance });
  if (grade.reward === 1) return { done: true, score: 1, final_answer: answer, observation: null, tool_call: call, reason: 'correct' };
  if (outOfTurns) return { done: true, score: 0, final_answer: answer, observation: null, tool_call: call, reason: 'out_of_turns' };
  return {
    done: false,
    score: null,
    final_answer: null,
    observation: feedback(`calc_score: the answer ${answer} is incorrect.`, nextIsLast),
    tool_call: call,
    reason: nextIsLast ? 'last_chance' : 'wrong',
  };
}

export const geo3kEnvironment: Environment = { name: 'geo3k', step: geo3kStep };
