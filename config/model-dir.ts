// What a local model directory holds, read from its config.json (the same reader as every config-like
// file: base/bounded-file.ts), for checks that need to know the model before anything loads it.
import path from 'node:path';
import { CONFIG_FILE, readBoundedText } from '../base/bounded-file.js';

/** Whether the model directory holds a mixture-of-experts model (its config names experts): true or
 *  false, or null where that cannot be told offline (a Hugging Face id, not a local directory; no
 *  readable config.json). */
export function isMoeModel(dir: string): boolean | null {
  try {
    const c = JSON.parse(readBoundedText(path.join(dir, 'config.json'), CONFIG_FILE)) as {
      num_experts?: number;
      text_config?: { num_experts?: number };
    };
    return (c.text_config?.num_experts ?? c.num_experts ?? 0) > 0;
  } catch {
    return null;
  }
}
