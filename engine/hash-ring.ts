// Consistent hashing with virtual nodes: a key maps to the first node point clockwise of its hash,
// skipping nodes that are out. A node leaving moves only its own keys; when it returns they come back.
import { createHash } from 'node:crypto';

function hash32(text: string): number {
  return createHash('sha256').update(text).digest().readUInt32BE(0);
}

export class HashRing {
  private readonly points: Array<{ at: number; node: string }>;

  constructor(
    readonly nodes: string[],
    readonly virtualNodes = 128,
  ) {
    if (nodes.length === 0) throw new Error('a hash ring needs at least one node');
    this.points = nodes
      .flatMap((node) => Array.from({ length: virtualNodes }, (_, v) => ({ at: hash32(`${node}#${v}`), node })))
      .sort((a, b) => a.at - b.at || (a.node < b.node ? -1 : 1));
  }

  /** The node for `key` among those `isIn` accepts; null when none is. */
  lookup(key: string, isIn: (node: string) => boolean = () => true): string | null {
    const h = hash32(key);
    let lo = 0;
    let hi = this.points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.points[mid]!.at < h) lo = mid + 1;
      else hi = mid;
    }
    for (let i = 0; i < this.points.length; i++) {
      const p = this.points[(lo + i) % this.points.length]!;
      if (isIn(p.node)) return p.node;
    }
    return null;
  }
}
