// Exact rational arithmetic (bigint numerator/denominator) for answers made only of numbers,
// + − × ÷ and integer powers: 0.5 vs 1/2, 10^999 vs 10^400, 7.5 vs 15/2 are decided exactly, the
// way sympy decides them for vime. Anything with a root, π, a function or a symbol is not rational
// here and goes to the high-precision comparison instead.
import type { MathNode } from 'mathjs';

export interface Rational {
  n: bigint;
  d: bigint; // > 0, gcd(n, d) = 1
}

/** Beyond this many bits (about 12,000 digits) a number is refused rather than computed. */
const MAX_BITS = 40_000;
const MAX_DIGITS = Math.floor(MAX_BITS * Math.log10(2));

export class TooLargeError extends Error {
  constructor() {
    super(`a number with more than ${MAX_DIGITS} digits`);
    this.name = 'TooLargeError';
  }
}
export class NoValueError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NoValueError';
  }
}

const abs = (x: bigint) => (x < 0n ? -x : x);
function gcd(a: bigint, b: bigint): bigint {
  a = abs(a);
  b = abs(b);
  while (b) [a, b] = [b, a % b];
  return a;
}
const bits = (x: bigint) => abs(x).toString(16).length * 4;

function make(n: bigint, d: bigint): Rational {
  if (d === 0n) throw new NoValueError('division by zero');
  if (d < 0n) [n, d] = [-n, -d];
  const g = gcd(n, d) || 1n;
  const r = { n: n / g, d: d / g };
  if (bits(r.n) > MAX_BITS || bits(r.d) > MAX_BITS) throw new TooLargeError();
  return r;
}

export const ratEquals = (a: Rational, b: Rational) => a.n === b.n && a.d === b.d;

/** A decimal literal as written ("8.66", "1e-3", "12") as an exact rational. */
export function rationalOfDecimal(text: string): Rational {
  const m = /^([+-]?)(\d*)(?:\.(\d*))?(?:e([+-]?\d+))?$/i.exec(text.trim());
  if (!m || (m[2] === '' && (m[3] ?? '') === '')) throw new NoValueError(`not a decimal number: ${text}`);
  const frac = m[3] ?? '';
  const exp = Number(m[4] ?? '0') - frac.length;
  if (!Number.isSafeInteger(exp) || Math.abs(exp) > MAX_DIGITS) throw new TooLargeError();
  const digits = BigInt(`${m[2] || '0'}${frac}`) * (m[1] === '-' ? -1n : 1n);
  return exp >= 0 ? make(digits * 10n ** BigInt(exp), 1n) : make(digits, 10n ** BigInt(-exp));
}

function power(base: Rational, exponent: Rational): Rational | null {
  if (exponent.d !== 1n) return null; // 4^(1/2): a root, not rational arithmetic
  const e = exponent.n;
  if (base.n === 0n) {
    if (e < 0n) throw new NoValueError('division by zero');
    return e === 0n ? make(1n, 1n) : make(0n, 1n);
  }
  if (abs(base.n) === 1n && base.d === 1n) return make(e % 2n === 0n ? 1n : base.n, 1n);
  const size = BigInt(Math.max(bits(base.n), bits(base.d)) - 1) * abs(e);
  if (size > BigInt(MAX_BITS)) throw new TooLargeError();
  const p = abs(e);
  return e >= 0n ? make(base.n ** p, base.d ** p) : make(base.d ** p, base.n ** p);
}

type Node = MathNode & { type: string; fn?: unknown; args?: MathNode[]; content?: MathNode; value?: unknown };

/**
 * The exact value of a rational expression; null when the expression is not one (a root, π, a
 * function, a symbol). Throws TooLargeError or NoValueError. Recursion depth is bounded by the
 * nesting limit that parseAnswer enforces.
 */
export function exactValue(node: MathNode): Rational | null {
  const n = node as Node;
  switch (n.type) {
    case 'ConstantNode': {
      const v = n.value as { isFinite?: () => boolean } | number;
      const finite = typeof v === 'number' ? Number.isFinite(v) : typeof v?.isFinite === 'function' && v.isFinite();
      return finite ? rationalOfDecimal(String(v)) : null;
    }
    case 'ParenthesisNode':
      return exactValue(n.content!);
    case 'OperatorNode': {
      const args = n.args!.map(exactValue);
      if (args.some((a) => a === null)) return null;
      const [a, b] = args as Rational[];
      switch (n.fn) {
        case 'unaryPlus':
          return a!;
        case 'unaryMinus':
          return make(-a!.n, a!.d);
        case 'add':
          return make(a!.n * b!.d + b!.n * a!.d, a!.d * b!.d);
        case 'subtract':
          return make(a!.n * b!.d - b!.n * a!.d, a!.d * b!.d);
        case 'multiply':
          return make(a!.n * b!.n, a!.d * b!.d);
        case 'divide':
          return make(a!.n * b!.d, a!.d * b!.n);
        case 'pow':
          return power(a!, b!);
        default:
          return null;
      }
    }
    default:
      return null;
  }
}

/** A short decimal rendering for reasons ("8.66", "1e+999"). */
export function formatRational(r: Rational): string {
  const v = Number(r.n) / Number(r.d);
  if (Number.isFinite(v) && v !== 0) return Number.isInteger(v) && Math.abs(v) < 1e15 ? String(v) : v.toPrecision(8);
  if (r.n === 0n) return '0';
  const digits = abs(r.n).toString().length - abs(r.d).toString().length;
  return `${r.n < 0n ? '-' : ''}~1e${digits}`;
}
