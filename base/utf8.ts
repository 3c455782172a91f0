// Strict UTF-8: text from files tempo-rl reads (configs, datasets) is never decoded with silent
// U+FFFD replacement; a bad byte is an error that says where it is.

export class Utf8Error extends Error {
  constructor(
    readonly offset: number,
    readonly byte: number,
  ) {
    super(`not valid UTF-8: byte 0x${byte.toString(16).padStart(2, '0')} at offset ${offset}`);
    this.name = 'Utf8Error';
  }
}

/** The range the byte after a lead byte must be in (Unicode 15, table 3-7: no overlong forms, no
 *  surrogates, nothing past U+10FFFF), and how many continuation bytes follow; null: not a lead byte. */
function leadOf(b: number): { n: number; lo: number; hi: number } | null {
  if (b >= 0xc2 && b <= 0xdf) return { n: 1, lo: 0x80, hi: 0xbf };
  if (b === 0xe0) return { n: 2, lo: 0xa0, hi: 0xbf };
  if (b === 0xed) return { n: 2, lo: 0x80, hi: 0x9f };
  if (b >= 0xe1 && b <= 0xef) return { n: 2, lo: 0x80, hi: 0xbf };
  if (b === 0xf0) return { n: 3, lo: 0x90, hi: 0xbf };
  if (b === 0xf4) return { n: 3, lo: 0x80, hi: 0x8f };
  if (b >= 0xf1 && b <= 0xf3) return { n: 3, lo: 0x80, hi: 0xbf };
  return null;
}

/** The offset of the first byte of the first ill-formed sequence (its lead byte, as Python's decoder
 *  reports it: a cut sequence is named by where it starts, not by the byte after it), or -1. */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length; ) {
    const b = bytes[i]!;
    if (b < 0x80) {
      i++;
      continue;
    }
    const lead = leadOf(b);
    // not a lead byte, or a sequence cut by the end
    if (!lead || i + lead.n >= bytes.length) return i;
    const second = bytes[i + 1]!;
    if (second < lead.lo || second > lead.hi) return i;
    for (let k = 2; k <= lead.n; k++) {
      const c = bytes[i + k]!;
      if (c < 0x80 || c > 0xbf) return i;
    }
    i += lead.n + 1;
  }
  return -1;
}

/** Decodes UTF-8 (a leading BOM dropped) or throws a Utf8Error at the first bad sequence. */
export function decodeUtf8(bytes: Uint8Array): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    const at = Math.max(0, firstInvalidUtf8(bytes));
    throw new Utf8Error(at, bytes[at] ?? 0);
  }
}
