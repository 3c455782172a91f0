// The arithmetic environment's calculator: + - * / and parentheses over decimal numbers, and `ans`,
// the previous result (the episode's running memory). A small parser, never eval: the expression is
// model output.
export const MAX_EXPRESSION_CHARS = 200;

export type Evaluation = { value: number; error: null } | { value: null; error: string };

type Token =
  | { kind: 'num'; value: number; at: number }
  | { kind: 'ans'; at: number }
  | { kind: 'op'; op: string; at: number };

function tokenize(src: string): Token[] | string {
  const tokens: Token[] = [];
  const re = /\s*(?:(\d+(?:\.\d*)?|\.\d+)|(ans)\b|([-+*/()×÷]))/y;
  let at = 0;
  while (at < src.length) {
    re.lastIndex = at;
    const m = re.exec(src);
    if (!m) {
      if (src.slice(at).trim() === '') break;
      const ch = src.slice(at).trimStart()[0]!;
      return `unexpected ${JSON.stringify(ch)} at position ${src.length - src.slice(at).trimStart().length + 1}`;
    }
    const pos = re.lastIndex - m[0].trimStart().length + 1;
    if (m[1] !== undefined) tokens.push({ kind: 'num', value: Number(m[1]), at: pos });
    else if (m[2] !== undefined) tokens.push({ kind: 'ans', at: pos });
    else tokens.push({ kind: 'op', op: m[3] === '×' ? '*' : m[3] === '÷' ? '/' : m[3]!, at: pos });
    at = re.lastIndex;
  }
  return tokens;
}

class CalcError extends Error {}

/** Evaluates `expression` with `ans` bound to the previous result (null: there is none yet). */
export function evaluate(expression: string, ans: number | null): Evaluation {
  if (expression.length > MAX_EXPRESSION_CHARS)
    return { value: null, error: `expression longer than ${MAX_EXPRESSION_CHARS} characters` };
  const tokens = tokenize(expression);
  if (typeof tokens === 'string') return { value: null, error: tokens };
  if (tokens.length === 0) return { value: null, error: 'empty expression' };
  let i = 0;
  const peek = () => tokens[i];
  const isOp = (op: string) => {
    const t = peek();
    return t?.kind === 'op' && t.op === op;
  };
  const where = () => (peek() ? `at position ${peek()!.at}` : 'at the end');
  // expr := term (('+'|'-') term)* ; term := unary (('*'|'/') unary)* ; unary := ('-'|'+') unary | primary
  const expr = (): number => {
    let v = term();
    while (isOp('+') || isOp('-')) v = (tokens[i++] as { op: string }).op === '+' ? v + term() : v - term();
    return v;
  };
  const term = (): number => {
    let v = unary();
    while (isOp('*') || isOp('/')) {
      const op = (tokens[i++] as { op: string }).op;
      const r = unary();
      if (op === '/' && r === 0) throw new CalcError('division by zero');
      v = op === '*' ? v * r : v / r;
    }
    return v;
  };
  const unary = (): number => {
    if (isOp('-')) return (i++, -unary());
    if (isOp('+')) return (i++, unary());
    return primary();
  };
  const primary = (): number => {
    const t = peek();
    if (t?.kind === 'num') return (i++, t.value);
    if (t?.kind === 'ans') {
      i++;
      if (ans === null) throw new CalcError('ans is not set yet (no earlier result)');
      return ans;
    }
    if (isOp('(')) {
      i++;
      const v = expr();
      if (!isOp(')')) throw new CalcError(`expected ")" ${where()}`);
      i++;
      return v;
    }
    throw new CalcError(`expected a number, ans or "(" ${where()}`);
  };
  try {
    const value = expr();
    const extra = peek();
    if (extra)
      throw new CalcError(
        `unexpected ${extra.kind === 'op' ? JSON.stringify(extra.op) : extra.kind === 'num' ? 'number' : 'ans'} ${where()}`,
      );
    if (!Number.isFinite(value)) return { value: null, error: 'the result is not a finite number' };
    return { value, error: null };
  } catch (err) {
    if (err instanceof CalcError) return { value: null, error: err.message };
    throw err;
  }
}

/** A result as the model reads it: integers whole, other values to 12 significant digits. */
export function formatValue(value: number): string {
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return String(value);
  return String(Number(value.toPrecision(12)));
}
