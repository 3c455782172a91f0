// String normalisation of an answer before any parsing: wrappers, text, units, degrees, percent,
// "x =" prefixes, thousands separators. Returns LaTeX-ish text; latex.ts turns it into mathjs syntax.
import { extractBoxed } from './extract.js';

const UNIT_WORDS = [
  'square units',
  'sq units',
  'units',
  'unit',
  'cm',
  'mm',
  'km',
  'm',
  'in',
  'inches',
  'inch',
  'ft',
  'feet',
  'foot',
  'yd',
  'yards',
  'yard',
  'meters',
  'meter',
  'metres',
  'metre',
  'centimeters',
  'centimeter',
  'millimeters',
  'kilometers',
  'miles',
  'mile',
  'mi',
  'degrees',
  'degree',
  'deg',
  'radians',
  'radian',
  'rad',
];
const UNIT_RE = new RegExp(
  `([\\d}).\\s])\\s*(?:square\\s+|sq\\.?\\s*)?(?:${UNIT_WORDS.map((u) => u.replace(/ /g, '\\s+')).join('|')})` +
    `(?:\\s*\\^\\s*\\{?\\s*[23]\\s*\\}?|²|³)?\\s*$`,
  'i',
);

function unwrapTextCommands(s: string): string {
  // \text{cm} → " cm ": the content stays (it may be a unit to strip or a letter answer)
  let prev;
  do {
    prev = s;
    s = s.replace(/\\(?:text|textrm|textbf|mathrm|mbox|mathbf|operatorname)\s*\{([^{}]*)\}/g, ' $1 ');
  } while (s !== prev);
  return s;
}

function stripDegrees(s: string): string {
  return s
    .replace(/\^\s*\{\s*\\circ\s*\}/g, ' ')
    .replace(/\^\s*\\circ/g, ' ')
    .replace(/\^\s*\{\s*o\s*\}/g, ' ')
    .replace(/\\circ|\\degree|°|º/g, ' ');
}

function stripTrailingUnits(s: string): string {
  let prev;
  do {
    prev = s;
    s = s.replace(UNIT_RE, '$1').trim();
  } while (s !== prev && s.length > 0);
  return s;
}

/** Removes a leading "x =", "AB =", "\angle ABC =", "m\angle 1 =" (the answer is what follows). */
function stripAssignment(s: string): string {
  const m =
    /^(?:m?\s*\\?(?:angle|measuredangle|overline|triangle)?\s*\{?\s*[A-Za-z][A-Za-z0-9_{}']*\s*\}?)\s*=\s*(.+)$/s.exec(
      s,
    );
  return m?.[1] ? m[1] : s;
}

export function normalizeAnswerText(raw: string): string {
  let s = raw.replace(/\s+/g, ' ').trim();
  s = s.replace(/^\s*(?:final\s+)?answer\s*[:：]?\s*/i, '').replace(/^the\s+answer\s+is\s*[:：]?\s*/i, '');
  s = s
    .replace(/\\\(|\\\)|\\\[|\\\]/g, ' ')
    .replace(/\$/g, ' ')
    .trim();
  // a tool argument written as "\boxed{5}": the box is a wrapper, not part of the answer
  const boxed = /^\\(?:boxed|fbox)\s*\{/.test(s) ? extractBoxed(s) : null;
  if (boxed !== null && s.replace(/^\\(?:boxed|fbox)\s*/, '') === `{${boxed}}`) s = boxed;
  s = s.replace(/\\displaystyle/g, ' ');
  s = unwrapTextCommands(s);
  s = stripDegrees(s);
  s = s.replace(/\\%|%/g, ' ');
  s = s.replace(/\\[,;:! ]|~/g, ' ').replace(/\\(?:quad|qquad)\b/g, ' ');
  s = s
    .trim()
    .replace(/[.。]+$/, '')
    .trim();
  // "5\sqrt{3} \approx 8.66" keeps the exact part.
  s = s.split(/\\approx|≈/)[0]!.trim();
  s = s.replace(/\s*\b(million|billion|trillion)\b/gi, (_m, w: string) => `*10^${SCALE_WORDS[w.toLowerCase()]}`);
  // "x = 3 or x = 4" is two answers (as in vime's normalisation), never the last one alone.
  s = s.replace(/\s+(?:or|and)\s+|\s*\\(?:lor|vee)\b\s*/gi, ', ');
  s = stripThousandsSeparators(s);
  // Several top-level elements ("x = 3, y = 4"): each is normalised on its own when compared.
  if (splitTopLevel(s).length > 1) return unquote(s);
  // a chain "x = a = b" keeps the last part
  s = stripAssignment(s);
  if (/=/.test(s) && !/[<>]=|!=/.test(s)) s = s.split('=').pop()!.trim();
  s = stripTrailingUnits(s);
  return unquote(s);
}

const SCALE_WORDS: Record<string, number> = { million: 6, billion: 9, trillion: 12 };

/** "1,000" and "x = 12,345.5" lose their separators; "(1,234)" (a pair) keeps its comma. */
function stripThousandsSeparators(s: string): string {
  return s.replace(
    /(^|[\s=:])([+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?)(?=$|\s)/g,
    (_m, pre: string, n: string) => pre + n.replace(/,/g, ''),
  );
}

function unquote(s: string): string {
  return s
    .replace(/^'(.*)'$/s, '$1')
    .replace(/^"(.*)"$/s, '$1')
    .replace(/\s+/g, ' ')
    .trim();
}

export type Bracketed = { open: string; close: string; items: string[] };

function splitTopLevel(s: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    if (ch === '\\' && (s[i + 1] === '{' || s[i + 1] === '}')) {
      depth += s[i + 1] === '{' ? 1 : -1;
      i++;
    } else if (ch === '(' || ch === '[' || ch === '{') depth++;
    else if (ch === ')' || ch === ']' || ch === '}') depth--;
    else if (ch === ',' && depth === 0) {
      parts.push(s.slice(start, i).trim());
      start = i + 1;
    }
  }
  parts.push(s.slice(start).trim());
  return parts;
}

/** Whether the opening bracket at 0 closes exactly at the end of s. */
function wrapsWhole(s: string, openLen: number): boolean {
  let depth = 0;
  for (let i = openLen - 1; i < s.length; i++) {
    const ch = s[i];
    if (ch === '(' || ch === '[' || ch === '{') depth++;
    else if (ch === ')' || ch === ']' || ch === '}') {
      depth--;
      if (depth === 0) return i === s.length - 1;
    }
  }
  return false;
}

/** A tuple, interval, set or bare list with top-level commas; null for a single value. */
export function splitCollection(s: string): Bracketed | null {
  const t = s.replace(/\\left|\\right/g, '').trim();
  const set = /^\\\{(.*)\\\}$/s.exec(t) ?? (t.startsWith('{') && wrapsWhole(t, 1) ? /^\{(.*)\}$/s.exec(t) : null);
  if (set) {
    const items = splitTopLevel(set[1]!);
    return items.length > 1 ? { open: '{', close: '}', items } : null;
  }
  const first = t[0];
  const last = t[t.length - 1];
  if ((first === '(' || first === '[') && (last === ')' || last === ']') && t.length >= 2) {
    const inner = t.slice(1, -1);
    const items = splitTopLevel(inner);
    // "(1+2)" is a parenthesised value; "(1,2)" and "[1,2)" are collections
    if (items.length > 1 && (first === last.replace(')', '(').replace(']', '[') ? wrapsWhole(t, 1) : true))
      return { open: first, close: last, items };
    return null;
  }
  const bare = splitTopLevel(t);
  return bare.length > 1 ? { open: '', close: '', items: bare } : null;
}
