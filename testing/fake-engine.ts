// An engine double for the pool's unit tests: records calls, fails on demand, and can hold generate
// requests open (to load an engine) until released.
import type { PoolEngine } from '../engine/pool.js';
import type { GenerateInput, GenerateResult } from '../engine/types.js';

export class FakeEngine implements PoolEngine {
  calls: string[] = [];
  /** Token ids of every generate request, in order. */
  prompts: number[][] = [];
  fail: Error | null = null;
  healthy = true;
  /** While set, generate waits for it. */
  gate: Promise<void> | null = null;
  /** What generate answers. */
  output = [1];
  constructor(readonly url: string) {}
  private async act<T>(name: string, value: T): Promise<T> {
    this.calls.push(name);
    if (this.fail) throw this.fail;
    return value;
  }
  isHealthy = async () => this.healthy;
  generate = async (input: GenerateInput) => {
    this.prompts.push(input.tokenIds);
    if (this.gate) await this.gate;
    return this.act<GenerateResult>('generate', {
      engine: this.url,
      tokenIds: this.output,
      logprobs: this.output.map(() => -1),
      finishReason: 'length',
      stopReason: null,
      routedExperts: null,
      weightVersions: null,
      promptTokens: input.tokenIds.length,
      promptLogprobs: null,
    });
  };
  renderChat = async () => this.act('render', { tokenIds: [1], features: null, imagePlaceholders: [] });
  tokenizeChat = async () => this.act('tokenize', [1]);
  tokenize = async () => this.act('tokenize-text', [1]);
  detokenize = async () => this.act('detokenize', 'x');
  resetPrefixCache = async () => this.act('reset', true);
  metrics = async () =>
    this.act('metrics', {
      prefixCacheHits: 0,
      prefixCacheQueries: 0,
      running: 0,
      waiting: 0,
      promptTokens: 0,
      generationTokens: 0,
    });
}

/** A gate and the function that opens it. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}
