// A label in the ascii form of Geo3K (5*sqrt(3), 13*pi/9) written as LaTeX (5\sqrt{3}, \frac{13\pi}{9}),
// the way a model is expected to answer. Used by the SFT export and the reward tests.
import { mathjs } from './mathjs.js';

export function labelToLatex(label: string): string {
  const tuple = /^\((.*)\)$/s.exec(label.trim());
  if (tuple && /^'[^']*'(\s*,\s*'[^']*')+$/.test(tuple[1]!.trim()))
    return `(${tuple[1]!
      .replace(/'/g, '')
      .split(/\s*,\s*/)
      .join(', ')})`;
  try {
    return mathjs('number')
      .parse(label)
      .toTex({ parenthesis: 'auto', implicit: 'hide' })
      .replace(/\\cdot(?=\\pi|\\sqrt|\\left|\\sin|\\cos|\\tan)/g, '')
      .replace(/~/g, ' ')
      .trim();
  } catch {
    return label;
  }
}
