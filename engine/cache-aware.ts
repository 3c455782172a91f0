// cache_aware routing (after SGLang's router): each engine keeps an approximate index of the token
// prefixes sent to it; a request goes to the engine holding its longest prefix unless that engine is
// busier than the least-loaded one by more than a threshold. No randomness: ties go to the less loaded,
// then (unmatched requests) the smaller index, then the earlier engine of the pool.
import type { MultiModalFeatures } from './schemas.js';

export interface CacheAwareOptions {
  /** Tokens per indexed block. vLLM reuses whole blocks only (16 on GPU by default, 32 on CPU here). */
  blockSize?: number;
  /** Blocks remembered per engine (blockSize × this tokens); the least recently used go first. */
  maxBlocksPerEngine?: number;
  /** In-flight requests by which the best-matching engine may exceed the least-loaded one. */
  balanceThreshold?: number;
  /** A match covering less than this share of the request counts as none: a system prompt every
   *  request shares must not pull every new prompt onto the engine that saw it first. */
  minMatchRatio?: number;
}

export const CACHE_AWARE_DEFAULTS: Required<CacheAwareOptions> = {
  blockSize: 16,
  maxBlocksPerEngine: 65_536,
  balanceThreshold: 4,
  minMatchRatio: 0.5,
};

/** An image's content hash at its placeholder offset: its placeholder ids are the same for every image. */
export interface PrefixExtra {
  offset: number;
  hash: string;
}

export function featureExtras(features: MultiModalFeatures | null | undefined): PrefixExtra[] {
  if (!features) return [];
  return Object.entries(features.mm_placeholders)
    .flatMap(([modality, ranges]) =>
      ranges.map((r, i) => ({ offset: r.offset, hash: features.mm_hashes[modality]?.[i] ?? `${modality}#${i}` })),
    )
    .sort((a, b) => a.offset - b.offset);
}

function mix(h1: number, h2: number, v: number): [number, number] {
  return [Math.imul(h1 ^ v, 2654435761), Math.imul(h2 ^ v, 1597334677)];
}

/**
 * One hash per full block, each chained on the one before, so block i of two sequences hashes alike
 * only if their first i + 1 blocks do (a 53-bit hash: collisions are negligible at these sizes).
 */
export function blockHashes(tokenIds: number[], blockSize: number, extras: PrefixExtra[] = []): number[] {
  const out: number[] = [];
  let prev = 0;
  let e = 0;
  for (let start = 0; start + blockSize <= tokenIds.length; start += blockSize) {
    let [h1, h2] = mix(0xdeadbeef ^ prev, 0x41c6ce57 ^ Math.floor(prev / 4294967296), blockSize);
    for (let i = start; i < start + blockSize; i++) [h1, h2] = mix(h1, h2, tokenIds[i]!);
    for (; e < extras.length && extras[e]!.offset < start + blockSize; e++)
      for (let c = 0; c < extras[e]!.hash.length; c++) [h1, h2] = mix(h1, h2, extras[e]!.hash.charCodeAt(c));
    h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
    h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
    prev = 4294967296 * (2097151 & h2) + (h1 >>> 0);
    out.push(prev);
  }
  return out;
}

/** The block hashes one engine was sent, least recently used first (a Map keeps insertion order). */
export class PrefixIndex {
  private readonly blocks = new Map<number, true>();

  constructor(readonly maxBlocks: number) {}

  get size(): number {
    return this.blocks.size;
  }

  /** How many leading blocks of `hashes` are indexed. */
  matched(hashes: number[]): number {
    let n = 0;
    while (n < hashes.length && this.blocks.has(hashes[n]!)) n++;
    return n;
  }

  insert(hashes: number[]): void {
    // Deepest block first, so a prefix is always more recent than its continuations and eviction
    // trims sequences from their ends, as a radix tree evicts leaves.
    for (let i = hashes.length - 1; i >= 0; i--) {
      this.blocks.delete(hashes[i]!);
      this.blocks.set(hashes[i]!, true);
    }
    for (const oldest of this.blocks.keys()) {
      if (this.blocks.size <= this.maxBlocks) break;
      this.blocks.delete(oldest);
    }
  }

  clear(): void {
    this.blocks.clear();
  }
}

export class CacheAwareRouter {
  readonly opts: Required<CacheAwareOptions>;
  private readonly indexes = new Map<string, PrefixIndex>();

  constructor(opts: CacheAwareOptions = {}) {
    this.opts = { ...CACHE_AWARE_DEFAULTS, ...opts };
  }

  private index(url: string): PrefixIndex {
    let ix = this.indexes.get(url);
    if (!ix) this.indexes.set(url, (ix = new PrefixIndex(this.opts.maxBlocksPerEngine)));
    return ix;
  }

  indexedBlocks(url: string): number {
    return this.indexes.get(url)?.size ?? 0;
  }

  /** The engine among `candidates` (pool order) for a request of `tokenIds`, given each one's in-flight load. */
  choose(tokenIds: number[], candidates: string[], load: (url: string) => number, extras: PrefixExtra[] = []): string {
    if (candidates.length === 0) throw new Error('no candidate engine');
    const byLoad = (a: string, b: string) => load(a) - load(b) || this.indexedBlocks(a) - this.indexedBlocks(b);
    const least = candidates.reduce((a, b) => (byLoad(b, a) < 0 ? b : a));
    const hashes = blockHashes(tokenIds, this.opts.blockSize, extras);
    let best = least;
    let blocks = 0;
    for (const url of candidates) {
      const n = this.indexes.get(url)?.matched(hashes) ?? 0;
      if (n > blocks || (n === blocks && n > 0 && load(url) < load(best))) [best, blocks] = [url, n];
    }
    if (blocks === 0 || blocks * this.opts.blockSize < this.opts.minMatchRatio * tokenIds.length) return least;
    return load(best) - load(least) > this.opts.balanceThreshold ? least : best;
  }

  /** Remembers that `url` was sent (or has computed) `tokenIds`. */
  record(url: string, tokenIds: number[], extras: PrefixExtra[] = []): void {
    this.index(url).insert(blockHashes(tokenIds, this.opts.blockSize, extras));
  }

  /** The engine's cache is gone (reset, or the engine was ejected and may come back empty). */
  forget(url: string): void {
    this.indexes.get(url)?.clear();
  }
}
