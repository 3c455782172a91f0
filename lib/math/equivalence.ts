// Equivalence of two scalar answers through mathjs: parse (after LaTeX conversion), allow only a
// whitelist of node types, functions and constants (never mathjs' import/createUnit/evaluate), then
// compare values — exactly up to float error, by the rounding a decimal shows, or within a tolerance.
import { all, create, type MathNode } from 'mathjs';
import { LatexError, latexToMathjs } from './latex.js';

const math = create(all!, { number: 'number' });

const ALLOWED_FUNCTIONS = new Set([
  'sqrt', 'nthRoot', 'cbrt', 'sin', 'cos', 'tan', 'cot', 'sec', 'csc', 'asin', 'acos', 'atan', 'acot', 'asec',
  'acsc', 'sinh', 'cosh', 'tanh', 'log', 'log10', 'log2', 'exp', 'abs', 'pow',
]);
const CONSTANTS: Record<string, number> = { pi: Math.PI, e: Math.E, Infinity: Infinity };
const OPERATORS = new Set(['add', 'subtract', 'multiply', 'divide', 'unaryMinus', 'unaryPlus', 'pow']);
const MAX_EXPRESSION_CHARS = 2000;

export type Parsed =
  | { ok: true; text: string; node: MathNode; variables: string[] }
  | { ok: false; text: string; reason: string };

function checkNode(node: MathNode, variables: Set<string>): string | null {
  let problem: string | null = null;
  node.traverse((n, _path, parent) => {
    if (problem) return;
    switch (n.type) {
      case 'ConstantNode':
        if (typeof (n as unknown as { value: unknown }).value !== 'number') problem = 'non-numeric constant';
        return;
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
        if (!(name in CONSTANTS)) {
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

/** Parses an already-normalised answer: plain mathjs syntax first, LaTeX conversion otherwise. */
export function parseAnswer(text: string): Parsed {
  if (text.length === 0) return { ok: false, text, reason: 'empty answer' };
  if (text.length > MAX_EXPRESSION_CHARS) return { ok: false, text, reason: `answer longer than ${MAX_EXPRESSION_CHARS} chars` };
  let expr: string;
  try {
    expr = /\\|[{}π√×·−]/.test(text) ? latexToMathjs(text) : text;
  } catch (err) {
    return { ok: false, text, reason: err instanceof LatexError ? err.message : 'unreadable LaTeX' };
  }
  let node: MathNode;
  try {
    node = math.parse(expr);
  } catch (err) {
    return { ok: false, text, reason: `cannot parse "${expr.slice(0, 80)}": ${(err as Error).message}` };
  }
  const variables = new Set<string>();
  const problem = checkNode(node, variables);
  if (problem) return { ok: false, text, reason: problem };
  return { ok: true, text, node, variables: [...variables].sort() };
}

function evaluateAt(node: MathNode, scope: Record<string, number>): number | null {
  try {
    const v = node.compile().evaluate({ ...CONSTANTS, ...scope }) as unknown;
    if (typeof v === 'number') return Number.isNaN(v) ? null : v;
    const c = v as { re?: number; im?: number };
    if (typeof c?.re === 'number' && typeof c.im === 'number' && Math.abs(c.im) <= 1e-12 * Math.max(1, Math.abs(c.re))) return c.re;
    return null;
  } catch {
    return null;
  }
}

const DECIMAL = /^[+-]?\d*\.(\d+)$/;

function significantDigits(text: string): number {
  return text.replace(/^[+-]?0*\.?0*/, '').replace(/\./, '').length;
}

export type Compare = { equal: boolean; reason: string };

/** Compares values: exact (float error), then a shown rounding, then the optional tolerance. */
export function compareValues(answer: number, label: number, answerText: string, labelText: string, tolerance: number): Compare {
  if (answer === label) return { equal: true, reason: 'equal' };
  if (!Number.isFinite(answer) || !Number.isFinite(label)) return { equal: false, reason: 'different values' };
  const diff = Math.abs(answer - label);
  if (diff <= 1e-9 * Math.max(1, Math.abs(answer), Math.abs(label))) return { equal: true, reason: 'equal' };
  // A label written as a rounded decimal with 2+ places (0.53 for 8/15): the answer rounds to it.
  const labelDecimal = DECIMAL.exec(labelText);
  if (labelDecimal && labelDecimal[1]!.length >= 2 && !DECIMAL.test(answerText)) {
    const places = labelDecimal[1]!.length;
    if (diff <= 0.5 * 10 ** -places + 1e-12) return { equal: true, reason: `equal after rounding to ${places} decimals (label)` };
  }
  // An answer written as a rounded decimal with at least 3 significant digits (8.66 for 5*sqrt(3)).
  const answerDecimal = DECIMAL.exec(answerText);
  if (answerDecimal && !labelDecimal && significantDigits(answerText) >= 3) {
    const places = answerDecimal[1]!.length;
    if (diff <= 0.5 * 10 ** -places + 1e-12) return { equal: true, reason: `equal after rounding to ${places} decimals` };
  }
  if (tolerance > 0 && diff <= tolerance * Math.max(1, Math.abs(label)))
    return { equal: true, reason: `within tolerance ${tolerance}` };
  return { equal: false, reason: `different values (${formatNumber(answer)} vs ${formatNumber(label)})` };
}

function formatNumber(v: number): string {
  return Number.isInteger(v) ? String(v) : v.toPrecision(8);
}

// Deterministic sample points for expressions with variables (x+1 vs 1+x).
const SAMPLE_POINTS = [0.5772, 1.4142, 2.7183, -0.693];

export function scalarsEquivalent(answer: Parsed & { ok: true }, label: Parsed & { ok: true }, tolerance: number): Compare {
  if (answer.variables.join(',') !== label.variables.join(','))
    return { equal: false, reason: `different variables (${answer.variables.join(',') || 'none'} vs ${label.variables.join(',') || 'none'})` };
  if (answer.variables.length === 0) {
    const a = evaluateAt(answer.node, {});
    const b = evaluateAt(label.node, {});
    if (b === null) return { equal: false, reason: 'label has no real value' };
    if (a === null) return { equal: false, reason: 'answer has no real value' };
    return compareValues(a, b, answer.text, label.text, tolerance);
  }
  for (let k = 0; k < SAMPLE_POINTS.length; k++) {
    const scope: Record<string, number> = {};
    answer.variables.forEach((v, i) => (scope[v] = SAMPLE_POINTS[(k + i) % SAMPLE_POINTS.length]! + i));
    const a = evaluateAt(answer.node, scope);
    const b = evaluateAt(label.node, scope);
    if (a === null || b === null) return { equal: false, reason: 'expression has no real value at a sample point' };
    const c = compareValues(a, b, '', '', 0);
    if (!c.equal) return { equal: false, reason: 'different expressions' };
  }
  return { equal: true, reason: 'equal expressions' };
}
