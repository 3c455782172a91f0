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

function valid(bytes: Uint8Array): boolean {
  try {
    // stream: a sequence cut at the end is not an error, so validity of prefixes is monotonic
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: true });
    return true;
  } catch {
    return false;
  }
}

/** Decodes UTF-8 (a leading BOM dropped) or throws a Utf8Error at the first bad byte. */
export function decodeUtf8(bytes: Uint8Array): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    // the longest valid prefix ends where the first bad sequence starts
    let lo = 0;
    let hi = bytes.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (valid(bytes.subarray(0, mid))) lo = mid;
      else hi = mid - 1;
    }
    throw new Utf8Error(lo, bytes[lo] ?? 0);
  }
}
