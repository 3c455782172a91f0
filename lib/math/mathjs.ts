// mathjs, loaded and set up on first use: that takes about a second, and most processes that load the
// config (whose environments grade with it) never grade an answer.
import { createRequire } from 'node:module';
import type { MathJsInstance } from 'mathjs';

const require = createRequire(import.meta.url);
const instances: Partial<Record<'number' | 'BigNumber', MathJsInstance>> = {};

/** A mathjs instance computing in JS numbers, or in 64-digit BigNumbers. */
export function mathjs(numbers: 'number' | 'BigNumber'): MathJsInstance {
  const made = instances[numbers];
  if (made) return made;
  const { all, create } = require('mathjs') as typeof import('mathjs');
  const math = create(all!, numbers === 'number' ? { number: 'number' } : { number: 'BigNumber', precision: 64 });
  instances[numbers] = math;
  return math;
}
