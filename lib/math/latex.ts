// LaTeX (and the loose notation models write) → mathjs expression syntax.
// mathjs parses the ascii labels (13*pi/9, 180*acos(97/111)/pi) directly but knows no LaTeX, so
// answers pass through this small converter first. Unknown commands are an error, never guessed.

export class LatexError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LatexError';
  }
}

const FUNCTIONS: Record<string, string> = {
  sin: 'sin',
  cos: 'cos',
  tan: 'tan',
  cot: 'cot',
  sec: 'sec',
  csc: 'csc',
  arcsin: 'asin',
  arccos: 'acos',
  arctan: 'atan',
  sinh: 'sinh',
  cosh: 'cosh',
  tanh: 'tanh',
  ln: 'log',
  log: 'log10',
  exp: 'exp',
};
const INVERSE: Record<string, string> = {
  sin: 'asin',
  cos: 'acos',
  tan: 'atan',
  cot: 'acot',
  sec: 'asec',
  csc: 'acsc',
};
const SYMBOLS: Record<string, string> = {
  pi: ' pi ',
  cdot: '*',
  times: '*',
  ast: '*',
  div: '/',
  infty: ' Infinity ',
  infin: ' Infinity ',
  lt: '<',
  gt: '>',
  le: '<=',
  ge: '>=',
  leq: '<=',
  geq: '>=',
  neq: '!=',
  approx: '≈',
  theta: ' theta ',
  alpha: ' alpha ',
  beta: ' beta ',
  gamma: ' gamma ',
};
// Commands that only change typesetting; they are dropped.
const IGNORED = new Set([
  'left',
  'right',
  'big',
  'Big',
  'bigg',
  'Bigg',
  'bigl',
  'bigr',
  'Bigl',
  'Bigr',
  'displaystyle',
  'textstyle',
  'limits',
  'quad',
  'qquad',
  'mathbf',
  'mathit',
  'mathrm',
  'text',
  'textbf',
  'mbox',
  'operatorname',
  'boldsymbol',
  'mathnormal',
]);
const UNICODE: Array<[RegExp, string]> = [
  [/π/g, '\\pi '],
  [/√/g, '\\sqrt'],
  [/[×·⋅]/g, '*'],
  [/÷/g, '/'],
  [/[−–—]/g, '-'],
  [/²/g, '^2'],
  [/³/g, '^3'],
  [/∞/g, '\\infty '],
  [/≤/g, '<='],
  [/≥/g, '>='],
];

class Reader {
  i = 0;
  constructor(readonly s: string) {}
  peek(): string | undefined {
    return this.s[this.i];
  }
  skipSpace(): void {
    while (this.i < this.s.length && /\s/.test(this.s[this.i]!)) this.i++;
  }
  command(): string {
    // at a backslash: returns the command name (letters) or the single escaped symbol
    this.i++;
    const m = /^[A-Za-z]+/.exec(this.s.slice(this.i, this.i + 40));
    if (m) {
      this.i += m[0].length;
      return m[0];
    }
    const ch = this.s[this.i] ?? '';
    this.i++;
    return ch;
  }
}

/** One argument: a {group}, a \command with its own arguments, or a single character. */
function readArgument(r: Reader): string {
  r.skipSpace();
  const ch = r.peek();
  if (ch === undefined) throw new LatexError('missing argument at end of input');
  if (ch === '{') return readGroup(r, '{', '}');
  if (ch === '\\') return convertCommand(r);
  r.i++;
  return ch;
}

function readGroup(r: Reader, open: string, close: string): string {
  if (r.peek() !== open) throw new LatexError(`expected ${open}`);
  r.i++;
  const out = convertUntil(r, close);
  if (r.peek() !== close) throw new LatexError(`unclosed ${open}`);
  r.i++;
  return out;
}

function convertCommand(r: Reader): string {
  const name = r.command();
  if (name === 'frac' || name === 'dfrac' || name === 'tfrac' || name === 'cfrac') {
    const num = readArgument(r);
    const den = readArgument(r);
    return `((${num})/(${den}))`;
  }
  if (name === 'sqrt') {
    r.skipSpace();
    if (r.peek() === '[') {
      const index = readGroup(r, '[', ']');
      return `nthRoot((${readArgument(r)}), (${index}))`;
    }
    return `sqrt(${readArgument(r)})`;
  }
  if (name in FUNCTIONS) {
    r.skipSpace();
    if (r.s.startsWith('^{-1}', r.i) || r.s.startsWith('^-1', r.i)) {
      r.i += r.s.startsWith('^{-1}', r.i) ? 5 : 3;
      const inv = INVERSE[name];
      if (!inv) throw new LatexError(`unsupported inverse \\${name}`);
      return ` ${inv}`;
    }
    return ` ${FUNCTIONS[name]}`;
  }
  if (name in SYMBOLS) return SYMBOLS[name]!;
  if (name === 'circ' || name === 'degree') return ' ';
  if (IGNORED.has(name)) return '';
  if (name === '{' || name === '}') return name === '{' ? '(' : ')';
  if (name === '%' || name === '$' || name === ',' || name === ';' || name === ':' || name === '!' || name === ' ')
    return ' ';
  if (name === '') throw new LatexError('lone backslash');
  throw new LatexError(`unsupported LaTeX command \\${name}`);
}

function convertUntil(r: Reader, close: string | null): string {
  let out = '';
  while (r.i < r.s.length) {
    const ch = r.s[r.i]!;
    if (close !== null && ch === close) return out;
    if (ch === '\\') out += convertCommand(r);
    else if (ch === '{') out += `(${readGroup(r, '{', '}')})`;
    else if (ch === '}') throw new LatexError('unbalanced }');
    else if (ch === '^') {
      r.i++;
      out += `^(${readArgument(r)})`;
    } else if (ch === '_') {
      r.i++;
      out += `_${readArgument(r).replace(/[^A-Za-z0-9]/g, '')}`;
    } else {
      out += ch === '~' ? ' ' : ch;
      r.i++;
    }
  }
  return out;
}

/** Converts one (already unboxed) answer to mathjs syntax; throws LatexError on what it cannot read. */
export function latexToMathjs(input: string): string {
  let s = input;
  for (const [re, to] of UNICODE) s = s.replace(re, to);
  // a mixed number: 2\frac{1}{2} is 2.5, not 2 × 1/2
  s = s.replace(/(^|[\s(+\-=,])(\d+)\s*\\[dt]?frac\s*\{(\d+)\}\s*\{(\d+)\}/g, '$1($2+$3/$4)');
  const r = new Reader(s);
  const out = convertUntil(r, null);
  return out.replace(/\s+/g, ' ').trim();
}
