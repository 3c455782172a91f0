// Comparing two evaluated answers. Exact: rationals by their bigint fractions, anything else (roots,
// π, trig) to 64 significant digits — far below any rounding a model writes, so only equal values
// pass. rounded and tolerance are the documented looser options (docs/reward.md).
import type { BigNumber } from 'mathjs';
import { formatRational, ratEquals, type Rational } from './exact.js';
import type { GradeOptions } from './options.js';

export type Value =
  | { kind: 'finite'; value: BigNumber }
  | { kind: 'infinite'; sign: 1 | -1 }
  | { kind: 'none'; reason: string };
export type Compare = { equal: boolean; reason: string };

/** What the comparison may use besides the values: the texts (their shown decimals) and exact fractions. */
export interface CompareContext {
  answerText: string;
  labelText: string;
  exact: { answer: Rational; label: Rational } | null;
}

// 64-digit evaluation leaves errors near 1e-63 relative; an exact zero (sin π) near 1e-64 absolute.
const RELATIVE_EQUAL = 1e-40;
const ABSOLUTE_ZERO = 1e-50;

/** Equal as values: same infinity, or finite and equal to 40 significant digits. */
export function sameValue(a: Value, b: Value): boolean {
  if (a.kind === 'none' || b.kind === 'none') return false;
  if (a.kind === 'infinite' || b.kind === 'infinite')
    return a.kind === 'infinite' && b.kind === 'infinite' && a.sign === b.sign;
  const diff = a.value.minus(b.value).abs();
  const scale = a.value.abs().greaterThan(b.value.abs()) ? a.value.abs() : b.value.abs();
  return diff.lte(ABSOLUTE_ZERO) || diff.lte(scale.times(RELATIVE_EQUAL));
}

const DECIMAL = /^[+-]?\d*\.(\d+)$/;

function significantDigits(text: string): number {
  return text.replace(/^[+-]?0*\.?0*/, '').replace(/\./, '').length;
}

/** The old default, now opt-in: a decimal with enough places that rounds the other side. */
function roundedMatch(diff: number, answerText: string, labelText: string): string | null {
  // A label written as a rounded decimal with 2+ places (0.53 for 8/15): the answer rounds to it.
  const labelDecimal = DECIMAL.exec(labelText);
  if (labelDecimal && labelDecimal[1]!.length >= 2 && !DECIMAL.test(answerText)) {
    const places = labelDecimal[1]!.length;
    if (diff <= 0.5 * 10 ** -places + 1e-12) return `equal after rounding to ${places} decimals (label)`;
  }
  // An answer written as a rounded decimal with at least 3 significant digits (8.66 for 5*sqrt(3)).
  const answerDecimal = DECIMAL.exec(answerText);
  if (answerDecimal && !labelDecimal && significantDigits(answerText) >= 3) {
    const places = answerDecimal[1]!.length;
    if (diff <= 0.5 * 10 ** -places + 1e-12) return `equal after rounding to ${places} decimals`;
  }
  return null;
}

function format(v: Value, exact: Rational | undefined): string {
  if (exact) return formatRational(exact);
  if (v.kind === 'infinite') return v.sign < 0 ? '-∞' : '∞';
  if (v.kind === 'none') return '?';
  return v.value.toSignificantDigits(8).toString();
}

export function compareNumbers(a: Value, b: Value, ctx: CompareContext, opts: Required<GradeOptions>): Compare {
  if (ctx.exact ? ratEquals(ctx.exact.answer, ctx.exact.label) : sameValue(a, b))
    return { equal: true, reason: 'equal' };
  const different = {
    equal: false,
    reason: `different values (${format(a, ctx.exact?.answer)} vs ${format(b, ctx.exact?.label)})`,
  };
  // Non-finite values are never close to anything: only the same infinity is equal (above).
  if (a.kind !== 'finite' || b.kind !== 'finite') return different;
  const diff = a.value.minus(b.value).abs();
  if (opts.match === 'rounded') {
    const rounded = roundedMatch(diff.toNumber(), ctx.answerText, ctx.labelText);
    if (rounded) return { equal: true, reason: rounded };
  }
  if (opts.tolerance > 0 && diff.lte(opts.tolerance))
    return { equal: true, reason: `within tolerance ${opts.tolerance}` };
  return different;
}
