// The default math reward model: the last \boxed{} of a response against a label, binary 0/1.
// Binary on purpose: a fractional reward makes r − mean(r) ≠ 0 in fp32 for an all-equal group.
// Nothing here throws on model output: whatever cannot be read scores 0 with a reason. A label
// that cannot be graded against (empty) throws LabelError: that is the data's fault, not the model's.
// docs/reward.md describes the rules and why the default is exact.
import { findLastBoxed } from './extract.js';
import { parseAnswer, scalarsEquivalent } from './equivalence.js';
import { normalizeAnswerText, splitCollection, type Bracketed } from './normalize.js';
import { LabelError, resolveGradeOptions, type GradeOptions } from './options.js';

export { extractBoxed, findLastBoxed } from './extract.js';
export { LabelError, REWARD_MATCHES, type GradeOptions, type RewardMatch } from './options.js';

type Resolved = Required<GradeOptions>;
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

function gradeScalar(answer: string, label: string, opts: Resolved): Grade {
  if (compact(answer) === compact(label)) return { reward: 1, reason: 'identical' };
  const parsedLabel = parseAnswer(compact(label) === label ? label : label.trim());
  const parsedAnswer = parseAnswer(answer);
  if (!parsedLabel.ok) {
    const same = compact(answer).toLowerCase() === compact(label).toLowerCase();
    return same
      ? { reward: 1, reason: 'identical text' }
      : { reward: 0, reason: `label not comparable (${parsedLabel.reason})` };
  }
  if (!parsedAnswer.ok) return { reward: 0, reason: `answer not readable: ${parsedAnswer.reason}` };
  const c = scalarsEquivalent(parsedAnswer, parsedLabel, opts);
  return { reward: c.equal ? 1 : 0, reason: c.reason };
}

function bracketsCompatible(a: Bracketed, l: Bracketed): boolean {
  if (a.open === '' || l.open === '') {
    const other = a.open === '' ? l : a;
    return other.open === '' || (other.open === '(' && other.close === ')');
  }
  return a.open === l.open && a.close === l.close;
}

function gradeCollection(a: Bracketed, l: Bracketed, opts: Resolved): Grade {
  if (a.items.length !== l.items.length)
    return { reward: 0, reason: `${a.items.length} elements, label has ${l.items.length}` };
  if (!bracketsCompatible(a, l))
    return { reward: 0, reason: `brackets ${a.open}…${a.close} differ from ${l.open}…${l.close}` };
  if (l.open === '{') {
    // a set: every label element matched by a distinct answer element
    const unused = [...a.items];
    for (const want of l.items) {
      const at = unused.findIndex(
        (got) => gradeScalar(normalizeAnswerText(got), normalizeAnswerText(want), opts).reward === 1,
      );
      if (at < 0) return { reward: 0, reason: `set element ${want} missing` };
      unused.splice(at, 1);
    }
    return { reward: 1, reason: 'equal sets' };
  }
  for (let i = 0; i < l.items.length; i++) {
    const g = gradeScalar(normalizeAnswerText(a.items[i]!), normalizeAnswerText(l.items[i]!), opts);
    if (g.reward === 0) return { reward: 0, reason: `element ${i + 1}: ${g.reason}` };
  }
  return { reward: 1, reason: 'equal element-wise' };
}

/** Throws LabelError when the label cannot be graded against (not a string, empty once normalised). */
export function checkLabel(label: unknown): string {
  if (typeof label !== 'string')
    throw new LabelError(`label must be a string, got ${label === null ? 'null' : typeof label}`);
  if (label.length > MAX_ANSWER_CHARS) throw new LabelError(`label longer than ${MAX_ANSWER_CHARS} chars`);
  const l = normalizeAnswerText(label);
  if (l.length === 0) throw new LabelError(`label is empty (${JSON.stringify(label)}): nothing to grade against`);
  return l;
}

/** Grades an already-extracted answer (a \boxed{} content or a calc_score argument) against a label. */
export function gradeAnswer(answer: string, label: string, opts: GradeOptions = {}): Grade {
  const l = checkLabel(label);
  try {
    if (typeof answer !== 'string') return { reward: 0, reason: 'answer is not a string' };
    if (answer.length > MAX_ANSWER_CHARS) return { reward: 0, reason: `answer longer than ${MAX_ANSWER_CHARS} chars` };
    const resolved = resolveGradeOptions(opts);
    const a = normalizeAnswerText(answer);
    if (a.length === 0) return { reward: 0, reason: 'empty answer' };
    const ca = splitCollection(a);
    const cl = splitCollection(l);
    if (ca && cl) return gradeCollection(ca, cl, resolved);
    if (ca || cl)
      return {
        reward: 0,
        reason: ca
          ? `answer has ${ca.items.length} elements, label one`
          : `label has ${cl!.items.length} elements, answer one`,
      };
    return gradeScalar(a, l, resolved);
  } catch (err) {
    return { reward: 0, reason: `grader error: ${(err as Error)?.message ?? String(err)}` };
  }
}

/** Scores a whole response: its last \boxed{}/\fbox{} against the label. */
export function scoreResponse(response: string, label: string, opts: GradeOptions = {}): Score {
  checkLabel(label);
  if (typeof response !== 'string') return { reward: 0, extracted: null, reason: 'response is not a string' };
  const boxed = findLastBoxed(response);
  if (boxed.kind === 'none') return { reward: 0, extracted: null, reason: 'no \\boxed{} answer' };
  if (boxed.kind === 'unclosed') return { reward: 0, extracted: null, reason: 'unclosed \\boxed{' };
  return { ...gradeAnswer(boxed.content, label, opts), extracted: boxed.content };
}
