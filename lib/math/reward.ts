// The default math reward model: the last \boxed{} of a response against a label, binary 0/1.
// Binary on purpose: a fractional reward makes r − mean(r) ≠ 0 in fp32 for an all-equal group.
// Nothing here throws on model output: whatever cannot be read scores 0 with a reason.
import { findLastBoxed } from './extract.js';
import { parseAnswer, scalarsEquivalent } from './equivalence.js';
import { normalizeAnswerText, splitCollection, type Bracketed } from './normalize.js';

export { extractBoxed, findLastBoxed } from './extract.js';

export interface GradeOptions {
  /** Accept |answer − label| ≤ tolerance · max(1, |label|). 0 (default): exact up to float error. */
  tolerance?: number;
}
export type Reward = 0 | 1;
export interface Grade {
  reward: Reward;
  reason: string;
}
export interface Score extends Grade {
  extracted: string | null;
}

const MAX_ANSWER_CHARS = 4000;

function compact(s: string): string {
  return s.replace(/\s+/g, '').replace(/^['"](.*)['"]$/s, '$1');
}

function gradeScalar(answer: string, label: string, tolerance: number): Grade {
  if (compact(answer) === compact(label)) return { reward: 1, reason: 'identical' };
  const parsedLabel = parseAnswer(compact(label) === label ? label : label.trim());
  const parsedAnswer = parseAnswer(answer);
  if (!parsedLabel.ok) {
    const same = compact(answer).toLowerCase() === compact(label).toLowerCase();
    return same ? { reward: 1, reason: 'identical text' } : { reward: 0, reason: `label not comparable (${parsedLabel.reason})` };
  }
  if (!parsedAnswer.ok) return { reward: 0, reason: `answer not readable: ${parsedAnswer.reason}` };
  const c = scalarsEquivalent(parsedAnswer, parsedLabel, tolerance);
  return { reward: c.equal ? 1 : 0, reason: c.reason };
}

function bracketsCompatible(a: Bracketed, l: Bracketed): boolean {
  if (a.open === '' || l.open === '') {
    const other = a.open === '' ? l : a;
    return other.open === '' || (other.open === '(' && other.close === ')');
  }
  return a.open === l.open && a.close === l.close;
}

function gradeCollection(a: Bracketed, l: Bracketed, tolerance: number): Grade {
  if (a.items.length !== l.items.length)
    return { reward: 0, reason: `${a.items.length} elements, label has ${l.items.length}` };
  if (!bracketsCompatible(a, l)) return { reward: 0, reason: `brackets ${a.open}…${a.close} differ from ${l.open}…${l.close}` };
  if (l.open === '{') {
    // a set: every label element matched by a distinct answer element
    const unused = [...a.items];
    for (const want of l.items) {
      const at = unused.findIndex((got) => gradeScalar(normalizeAnswerText(got), normalizeAnswerText(want), tolerance).reward === 1);
      if (at < 0) return { reward: 0, reason: `set element ${want} missing` };
      unused.splice(at, 1);
    }
    return { reward: 1, reason: 'equal sets' };
  }
  for (let i = 0; i < l.items.length; i++) {
    const g = gradeScalar(normalizeAnswerText(a.items[i]!), normalizeAnswerText(l.items[i]!), tolerance);
    if (g.reward === 0) return { reward: 0, reason: `element ${i + 1}: ${g.reason}` };
  }
  return { reward: 1, reason: 'equal element-wise' };
}

/** Grades an already-extracted answer (a \boxed{} content or a calc_score argument) against a label. */
export function gradeAnswer(answer: string, label: string, opts: GradeOptions = {}): Grade {
  try {
    if (typeof answer !== 'string' || typeof label !== 'string') return { reward: 0, reason: 'answer or label is not a string' };
    if (answer.length > MAX_ANSWER_CHARS) return { reward: 0, reason: `answer longer than ${MAX_ANSWER_CHARS} chars` };
    const tolerance = Number.isFinite(opts.tolerance) && (opts.tolerance ?? 0) > 0 ? opts.tolerance! : 0;
    const a = normalizeAnswerText(answer);
    const l = normalizeAnswerText(label);
    if (a.length === 0) return { reward: 0, reason: 'empty answer' };
    if (l.length === 0) return { reward: 0, reason: 'empty label' };
    const ca = splitCollection(a);
    const cl = splitCollection(l);
    if (ca && cl) return gradeCollection(ca, cl, tolerance);
    if (ca || cl) return { reward: 0, reason: ca ? 'answer has several elements, label one' : 'label has several elements, answer one' };
    return gradeScalar(a, l, tolerance);
  } catch (err) {
    return { reward: 0, reason: `grader error: ${(err as Error)?.message ?? String(err)}` };
  }
}

/** Scores a whole response: its last \boxed{}/\fbox{} against the label. */
export function scoreResponse(response: string, label: string, opts: GradeOptions = {}): Score {
  if (typeof response !== 'string') return { reward: 0, extracted: null, reason: 'response is not a string' };
  const boxed = findLastBoxed(response);
  if (boxed.kind === 'none') return { reward: 0, extracted: null, reason: 'no \\boxed{} answer' };
  if (boxed.kind === 'unclosed') return { reward: 0, extracted: null, reason: 'unclosed \\boxed{' };
  return { ...gradeAnswer(boxed.content, label, opts), extracted: boxed.content };
}
