// Equivalence of two scalar answers through mathjs: parse (after LaTeX conversion), allow only a
// whitelist of node types, functions and constants (never mathjs' import/createUnit/evaluate), then
// compare values: exactly (rationals as bigint fractions, everything else to 64 significant digits),
// or, when asked, by the rounding a decimal shows or within an absolute tolerance.
import type { BigNumber, MathNode } from 'mathjs';
import { mathjs } from './mathjs.js';
import { compareNumbers, sameValue, type Compare, type Value } from './compare.js';
import { exactValue, NoValueError, TooLargeError, type Rational } from './exact.js';
import { LatexError, latexToMathjs } from './latex.js';
import type { GradeOptions } from './options.js';

export type { Compare } from './compare.js';

// BigNumber literals keep every digit an answer writes; precision 64 leaves float error far behind.
const math = () => mathjs('BigNumber');

const ALLOWED_FUNCTIONS = new Set([
  'sqrt',
  'nthRoot',
  'cbrt',
  'sin',
  'cos',
  'tan',
  'cot',
  'sec',
  'csc',
  'asin',
  'acos',
  'atan',
  'acot',
  'asec',
  'acsc',
  'sinh',
  'cosh',
  'tanh',
  'log',
  'log10',
  'log2',
  'exp',
  'abs',
  'pow',
]);
let constants: Record<string, unknown> | undefined;
const CONSTANTS = () => (constants ??= { pi: math().pi, e: math().e, Infinity: math().bignumber(Infinity) });
const OPERATORS = new Set(['add', 'subtract', 'multiply', 'divide', 'unaryMinus', 'unaryPlus', 'pow']);
const MAX_EXPRESSION_CHARS = 2000;
/**
 * Deepest bracket nesting graded. The parser and the LaTeX converter recurse per level, and a few
 * hundred levels reach the call-stack limit; no real answer comes near this, so deeper is refused.
 */
export const MAX_NESTING = 50;

export type Parsed =
  | { ok: true; text: string; node: MathNode; variables: string[]; infinite: boolean }
  | { ok: false; text: string; reason: string };

/** The deepest nesting of (), [] and {} in s (escaped \{ counts too: it nests in LaTeX). */
export function nestingDepth(s: string): number {
  let depth = 0;
  let max = 0;
  for (const ch of s) {
    if (ch === '(' || ch === '[' || ch === '{') max = Math.max(max, ++depth);
    else if (ch === ')' || ch === ']' || ch === '}') depth = Math.max(0, depth - 1);
  }
  return max;
}

function checkNode(node: MathNode, variables: Set<string>): string | null {
  let problem: string | null = null;
  node.traverse((n, _path, parent) => {
    if (problem) return;
    switch (n.type) {
      case 'ConstantNode': {
        const v = (n as unknown as { value: unknown }).value;
        if (!math().isBigNumber(v) && typeof v !== 'number') problem = 'non-numeric constant';
        return;
      }
      case 'ParenthesisNode':
        return;
      case 'OperatorNode': {
        const fn = (n as unknown as { fn: string }).fn;
        if (!OPERATORS.has(fn)) problem = `operator ${(n as unknown as { op: string }).op} is not allowed`;
        return;
      }
      case 'FunctionNode': {
        const name = (n as unknown as { fn: { name?: string } }).fn.name ?? '';
        if (!ALLOWED_FUNCTIONS.has(name)) problem = `function ${name || '?'} is not allowed`;
        return;
      }
      case 'SymbolNode': {
        const name = (n as unknown as { name: string }).name;
        const isCallee = parent?.type === 'FunctionNode' && (parent as unknown as { fn: MathNode }).fn === n;
        if (isCallee) return;
        if (!(name in CONSTANTS())) {
          if (!/^[A-Za-z][A-Za-z0-9_]{0,15}$/.test(name)) problem = `bad symbol ${name}`;
          else variables.add(name);
        }
        return;
      }
      default:
        problem = `${n.type} is not allowed`;
    }
  });
  return problem;
}

/** ∞ as written: the symbol, or the constant the BigNumber parser makes of it. */
function isInfinityNode(n: MathNode): boolean {
  if (n.type === 'SymbolNode') return (n as unknown as { name: string }).name === 'Infinity';
  if (n.type !== 'ConstantNode') return false;
  const v = (n as unknown as { value: unknown }).value;
  return typeof v === 'number' ? !Number.isFinite(v) : math().isBigNumber(v) && !v.isFinite();
}

function tooDeep(text: string): string | null {
  const depth = nestingDepth(text);
  return depth > MAX_NESTING ? `brackets nested ${depth} deep (more than ${MAX_NESTING} are not graded)` : null;
}

/** Parses an already-normalised answer: plain mathjs syntax first, LaTeX conversion otherwise. */
export function parseAnswer(text: string): Parsed {
  if (text.length === 0) return { ok: false, text, reason: 'empty answer' };
  if (text.length > MAX_EXPRESSION_CHARS)
    return { ok: false, text, reason: `answer longer than ${MAX_EXPRESSION_CHARS} chars` };
  const deep = tooDeep(text);
  if (deep) return { ok: false, text, reason: deep };
  let expr: string;
  try {
    expr = /\\|[{}π√×·−]/.test(text) ? latexToMathjs(text) : text;
  } catch (err) {
    return { ok: false, text, reason: err instanceof LatexError ? err.message : 'unreadable LaTeX' };
  }
  // LaTeX conversion adds at most two parentheses per level (\frac{a}{b} → ((a)/(b))).
  if (nestingDepth(expr) > 3 * MAX_NESTING)
    return { ok: false, text, reason: `brackets nested more than ${MAX_NESTING} deep are not graded` };
  let node: MathNode;
  try {
    node = math().parse(expr);
  } catch (err) {
    return { ok: false, text, reason: `cannot parse "${expr.slice(0, 80)}": ${(err as Error).message}` };
  }
  const variables = new Set<string>();
  const problem = checkNode(node, variables);
  if (problem) return { ok: false, text, reason: problem };
  const infinite = node.filter((n) => isInfinityNode(n)).length > 0;
  return { ok: true, text, node, variables: [...variables].sort(), infinite };
}

/** The value at a point: a real BigNumber, ±Infinity (only when the answer writes ∞), or why there is none. */
function evaluateAt(p: Parsed & { ok: true }, scope: Record<string, BigNumber>): Value {
  let v: unknown;
  try {
    v = p.node.compile().evaluate({ ...CONSTANTS(), ...scope });
  } catch (err) {
    return { kind: 'none', reason: `cannot evaluate: ${(err as Error).message}` };
  }
  let real: BigNumber | null = null;
  if (math().isBigNumber(v)) real = v;
  else if (typeof v === 'number') real = math().bignumber(v);
  else if (math().isComplex(v) && Math.abs(v.im) <= 1e-12 * Math.max(1, Math.abs(v.re))) real = math().bignumber(v.re);
  if (real === null || real.isNaN()) return { kind: 'none', reason: 'no real value' };
  if (real.isFinite()) return { kind: 'finite', value: real };
  // ∞ is a value only where the answer writes it; elsewhere it is an overflow (10^(10^20)) or 1/0.
  if (!p.infinite) return { kind: 'none', reason: 'no finite value (overflow or division by zero)' };
  return { kind: 'infinite', sign: real.isNegative() ? -1 : 1 };
}

type Exact = { kind: 'rational'; value: Rational } | { kind: 'other' } | { kind: 'refused'; reason: string };

function exactOf(p: Parsed & { ok: true }): Exact {
  try {
    const r = exactValue(p.node);
    return r ? { kind: 'rational', value: r } : { kind: 'other' };
  } catch (err) {
    if (err instanceof TooLargeError) return { kind: 'refused', reason: `not graded: ${err.message}` };
    if (err instanceof NoValueError) return { kind: 'refused', reason: `has no value (${err.message})` };
    throw err;
  }
}

// Deterministic sample points for expressions with variables (x+1 vs 1+x).
const SAMPLE_POINTS = ['0.5772', '1.4142', '2.7183', '-0.693'];

export function scalarsEquivalent(
  answer: Parsed & { ok: true },
  label: Parsed & { ok: true },
  opts: Required<GradeOptions>,
): Compare {
  if (answer.variables.join(',') !== label.variables.join(','))
    return {
      equal: false,
      reason: `different variables (${answer.variables.join(',') || 'none'} vs ${label.variables.join(',') || 'none'})`,
    };
  if (answer.variables.length === 0) {
    const ea = exactOf(answer);
    const el = exactOf(label);
    if (el.kind === 'refused') return { equal: false, reason: `label ${el.reason}` };
    if (ea.kind === 'refused') return { equal: false, reason: `answer ${ea.reason}` };
    const b = evaluateAt(label, {});
    if (b.kind === 'none') return { equal: false, reason: `label has ${b.reason}` };
    const a = evaluateAt(answer, {});
    if (a.kind === 'none') return { equal: false, reason: `answer has ${a.reason}` };
    const exact = ea.kind === 'rational' && el.kind === 'rational' ? { answer: ea.value, label: el.value } : null;
    return compareNumbers(a, b, { answerText: answer.text, labelText: label.text, exact }, opts);
  }
  for (let k = 0; k < SAMPLE_POINTS.length; k++) {
    const scope: Record<string, BigNumber> = {};
    answer.variables.forEach(
      (v, i) =>
        (scope[v] = math()
          .bignumber(SAMPLE_POINTS[(k + i) % SAMPLE_POINTS.length]!)
          .plus(i)),
    );
    const a = evaluateAt(answer, scope);
    const b = evaluateAt(label, scope);
    if (a.kind === 'none' || b.kind === 'none')
      return { equal: false, reason: 'expression has no real value at a sample point' };
    if (!sameValue(a, b)) return { equal: false, reason: 'different expressions' };
  }
  return { equal: true, reason: 'equal expressions' };
}
