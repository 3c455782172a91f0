// Finding the final answer in a model response: the last \boxed{…} or \fbox{…}, brace-matched.
// Linear in the length of the input, so a pathological response cannot stall the scorer.

export type BoxedResult = { kind: 'found'; content: string } | { kind: 'none' } | { kind: 'unclosed' };

const BOX_COMMANDS = ['\\boxed', '\\fbox'];

/** The start index of the last box command that is a whole command name (not \boxedx). */
function lastBoxCommand(text: string): { start: number; after: number } | null {
  let best: { start: number; after: number } | null = null;
  for (const cmd of BOX_COMMANDS) {
    let from = text.length;
    while (from >= 0) {
      const at = text.lastIndexOf(cmd, from);
      if (at < 0) break;
      const next = text[at + cmd.length];
      if (next === undefined || !/[A-Za-z]/.test(next)) {
        if (!best || at > best.start) best = { start: at, after: at + cmd.length };
        break;
      }
      from = at - 1;
    }
  }
  return best;
}

/** Content between the brace at `open` and its match, honouring \{ and \} escapes. */
function matchBraces(text: string, open: number): string | null {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const ch = text[i];
    if (ch === '\\') {
      i++; // an escaped character never opens or closes a group
      continue;
    }
    if (ch === '{') depth++;
    else if (ch === '}') {
      depth--;
      if (depth === 0) return text.slice(open + 1, i);
    }
  }
  return null;
}

export function findLastBoxed(text: string): BoxedResult {
  const hit = lastBoxCommand(text);
  if (!hit) return { kind: 'none' };
  let i = hit.after;
  while (i < text.length && (text[i] === ' ' || text[i] === '\t')) i++;
  if (text[i] === '{') {
    const content = matchBraces(text, i);
    return content === null ? { kind: 'unclosed' } : { kind: 'found', content };
  }
  // "\boxed 5": the TeX form without braces takes the next token.
  const bare = /^\s*([^\s$\\]+)/.exec(text.slice(hit.after, hit.after + 200));
  return bare?.[1] ? { kind: 'found', content: bare[1] } : { kind: 'unclosed' };
}

/** The content of the last \boxed{}/\fbox{}, or null when there is none or it never closes. */
export function extractBoxed(text: string): string | null {
  const r = findLastBoxed(text);
  return r.kind === 'found' ? r.content : null;
}
