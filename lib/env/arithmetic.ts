// The arithmetic environment's step. A calculator call is evaluated (with `ans`, the previous result,
// from the state) and its value is the observation; submit ends the episode with its answer graded;
// a turn without a tool call ends it with its \boxed{} answer. A calculator or tool error gets
// feedback while turns are left; the turn before the last asks for the final answer.
import { checkedInput } from './checked-input.js';
import { extractBoxed, gradeAnswer } from '../math/reward.js';
import { ARITHMETIC_TOOL_USAGE, CALCULATOR, SUBMIT, type ArithmeticState } from './arithmetic-environment.js';
import { evaluate, formatValue } from './calculator.js';
import { lastToolCallBody, parseCall, stringArgument } from './tool-call.js';
import type { EnvStepInput, EnvStepResult, ToolCallReport } from './types.js';

type Step = { result: EnvStepResult; state: ArithmeticState };

function boxedAnswer(text: string): string | null {
  const boxed = extractBoxed(text);
  return boxed !== null && boxed.trim() !== '' ? boxed.trim() : null;
}

function withTurnsLeft(message: string, nextIsLast: boolean): string {
  return nextIsLast
    ? `${message} This is your last turn: give your final answer as \\boxed{answer} or submit it.`
    : message;
}

const gradeOf = (answer: string, input: EnvStepInput): 0 | 1 =>
  gradeAnswer(answer, input.label, { tolerance: input.tolerance, match: input.match }).reward;

/** Ends the episode on the turn's \boxed{} answer (none: score 0). */
function ended(text: string, input: EnvStepInput, reason: string, tool_call: ToolCallReport | null): EnvStepResult {
  const final_answer = boxedAnswer(text);
  return {
    done: true,
    score: final_answer === null ? 0 : gradeOf(final_answer, input),
    final_answer,
    observation: null,
    tool_call,
    reason,
  };
}

export function arithmeticStep(state: ArithmeticState, raw: EnvStepInput): Step {
  const input = checkedInput(raw);
  const { text } = input;
  const outOfTurns = input.turn >= input.max_turns;
  const nextIsLast = input.turn + 1 >= input.max_turns;
  const body = lastToolCallBody(text);
  if (body === null) return { result: ended(text, input, 'no_tool_call', null), state };

  const call = parseCall(body);
  let error = call.error;
  if (error === null && call.name !== CALCULATOR && call.name !== SUBMIT)
    error = `unknown tool ${JSON.stringify(call.name)}`;
  const argument =
    call.args === null
      ? null
      : call.name === SUBMIT
        ? stringArgument(call.args, 'answer')
        : stringArgument(call.args, 'expression');
  if (error === null && argument === null)
    error = `tool call has no "${call.name === SUBMIT ? 'answer' : 'expression'}" argument`;
  if (error !== null) {
    const report = { name: call.name, answer: null, error };
    if (outOfTurns) return { result: ended(text, input, 'tool_error_out_of_turns', report), state };
    const observation = withTurnsLeft(`Tool error: ${error}. ${ARITHMETIC_TOOL_USAGE}`, nextIsLast);
    return {
      result: { done: false, score: null, final_answer: null, observation, tool_call: report, reason: 'tool_error' },
      state,
    };
  }

  if (call.name === SUBMIT) {
    const score = gradeOf(argument!, input);
    const result = {
      done: true,
      score,
      final_answer: argument,
      observation: null,
      tool_call: { name: SUBMIT, answer: argument, error: null },
      reason: score === 1 ? 'correct' : 'wrong',
    };
    return { result, state };
  }

  const expression = argument!;
  const evaluation = evaluate(expression, state.ans);
  const value = evaluation.error === null ? formatValue(evaluation.value) : null;
  const next: ArithmeticState = {
    calls: [...state.calls, { expression, value, error: evaluation.error }],
    ans: evaluation.error === null ? evaluation.value : state.ans,
  };
  const report = { name: CALCULATOR, answer: null, error: null };
  if (outOfTurns) return { result: ended(text, input, 'out_of_turns', report), state: next };
  const observation = withTurnsLeft(
    value !== null
      ? `${CALCULATOR}: ${expression} = ${value} (kept as ans)`
      : `${CALCULATOR} error: ${evaluation.error}.`,
    nextIsLast,
  );
  return {
    result: {
      done: false,
      score: null,
      final_answer: null,
      observation,
      tool_call: report,
      reason: value !== null ? 'calculated' : 'calculator_error',
    },
    state: next,
  };
}
