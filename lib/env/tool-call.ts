// Reading Qwen-style tool calls out of an assistant turn:
//   <tool_call>{"name": "calc_score", "arguments": {"answer": "5"}}</tool_call>
// The last call in the turn counts. `{"function": {"name", "arguments"}}` and arguments given as a
// JSON string are accepted. A call cut off by a stop string (no closing tag) is still read.
import type { ToolCallReport } from './types.js';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

/** The body of the last <tool_call> block, or null when the turn has none. */
export function lastToolCallBody(text: string): string | null {
  const at = text.lastIndexOf(OPEN);
  if (at < 0) return null;
  const rest = text.slice(at + OPEN.length);
  const end = rest.indexOf(CLOSE);
  return (end < 0 ? rest : rest.slice(0, end)).trim();
}

function asObject(v: unknown): Record<string, unknown> | null {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
}

/** A call's name and argument object, or why it has none. */
export type ParsedCall =
  | { name: string; args: Record<string, unknown>; error: null }
  | { name: string | null; args: null; error: string };

/** Parses one tool-call body into its name and arguments; never throws. */
export function parseCall(body: string): ParsedCall {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (err) {
    return { name: null, args: null, error: `invalid JSON in tool call: ${(err as Error).message}` };
  }
  let call = asObject(parsed);
  if (!call) return { name: null, args: null, error: 'tool call is not a JSON object' };
  const fn = asObject(call.function);
  if (fn) call = fn;
  const name = typeof call.name === 'string' ? call.name : null;
  if (!name) return { name: null, args: null, error: 'tool call has no "name"' };
  let args: unknown = call.arguments ?? call.parameters;
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args);
    } catch (err) {
      return { name, args: null, error: `invalid JSON in tool call arguments: ${(err as Error).message}` };
    }
  }
  const argObj = asObject(args);
  if (!argObj) return { name, args: null, error: 'tool call "arguments" is not an object' };
  return { name, args: argObj, error: null };
}

/** A non-empty string argument (a finite number is taken as its decimal text), or null. */
export function stringArgument(args: Record<string, unknown>, key: string): string | null {
  const v = args[key];
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  if (typeof v !== 'string' || v.trim() === '') return null;
  return v.trim();
}

/** Parses one tool-call body whose tool takes an "answer"; never throws. */
export function parseToolCall(body: string): ToolCallReport {
  const call = parseCall(body);
  if (call.error !== null) return { name: call.name, answer: null, error: call.error };
  const answer = stringArgument(call.args, 'answer');
  if (answer === null) return { name: call.name, answer: null, error: 'tool call has no "answer" argument' };
  return { name: call.name, answer, error: null };
}
