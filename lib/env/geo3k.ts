// The Geo3K environment's step (docs/reward.md; its Environment object: geo3k-environment.ts): the model may check an answer with the calc_score tool;
// a correct answer ends the episode, a wrong one gets feedback until max_turns (the last chance asks
// for the final \boxed{} answer); a turn without a tool call ends the episode with its final
// \boxed{} answer (else its last non-empty line).
import { checkedInput } from './checked-input.js';
import { extractBoxed, gradeAnswer, type GradeOptions } from '../math/reward.js';
import { lastToolCallBody, parseToolCall } from './tool-call.js';
import type { EnvStepInput, EnvStepResult, ToolCallReport } from './types.js';

export const CALC_SCORE = 'calc_score';
/** How to call the one tool: every tool error repeats it, so the model learns the right call. */
export const CALC_SCORE_USAGE = `The only tool is ${CALC_SCORE}; call it as <tool_call>{"name": "${CALC_SCORE}", "arguments": {"answer": "your answer"}}</tool_call>.`;

/** The answer a turn ends with when it has no usable tool call. */
export function finalAnswerOf(text: string): string | null {
  const boxed = extractBoxed(text);
  if (boxed !== null && boxed.trim() !== '') return boxed.trim();
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  return lines.length > 0 ? lines[lines.length - 1]! : null;
}

function feedback(message: string, nextIsLast: boolean): string {
  if (!nextIsLast) return `${message} Please try again.`;
  return `${message} This is your last chance: think it through and give your final answer as \\boxed{answer}.`;
}

function ended(text: string, input: EnvStepInput, reason: string, tool_call: ToolCallReport | null): EnvStepResult {
  const final_answer = finalAnswerOf(text);
  const score = final_answer === null ? 0 : gradeAnswer(final_answer, input.label, gradeOptions(input)).reward;
  return { done: true, score, final_answer, observation: null, tool_call, reason };
}

const gradeOptions = (input: EnvStepInput): GradeOptions => ({ tolerance: input.tolerance, match: input.match });

/** A call to another tool is reported as such, before any complaint about its arguments. */
function checkedCall(body: string): ToolCallReport {
  const call = parseToolCall(body);
  if (call.name !== null && call.name !== CALC_SCORE)
    return { ...call, error: `unknown tool ${JSON.stringify(call.name)}` };
  return call;
}

export function geo3kStep(raw: EnvStepInput): EnvStepResult {
  const input = checkedInput(raw);
  const text = input.text;
  const outOfTurns = input.turn >= input.max_turns;
  const nextIsLast = input.turn + 1 >= input.max_turns;
  const body = lastToolCallBody(text);
  if (body === null) return ended(text, input, 'no_tool_call', null);

  const call = checkedCall(body);
  if (call.error) {
    if (outOfTurns) return ended(text, input, 'tool_error_out_of_turns', call);
    return {
      done: false,
      score: null,
      final_answer: null,
      observation: feedback(`Tool error: ${call.error}. ${CALC_SCORE_USAGE}`, nextIsLast),
      tool_call: call,
      reason: 'tool_error',
    };
  }
  const answer = call.answer!;
  const grade = gradeAnswer(answer, input.label, gradeOptions(input));
  if (grade.reward === 1)
    return { done: true, score: 1, final_answer: answer, observation: null, tool_call: call, reason: 'correct' };
  if (outOfTurns)
    return { done: true, score: 0, final_answer: answer, observation: null, tool_call: call, reason: 'out_of_turns' };
  return {
    done: false,
    score: 0,
    final_answer: null,
    observation: feedback(`calc_score: the answer ${answer} is incorrect.`, nextIsLast),
    tool_call: call,
    reason: nextIsLast ? 'last_chance' : 'wrong',
  };
}
