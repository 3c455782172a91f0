// The few Prometheus series of vLLM's /metrics that tempo-rl reads, summed over label sets.
import { z } from 'zod';
import type { EngineMetrics } from './types.js';

const SERIES = {
  prefixCacheHits: 'vllm:prefix_cache_hits_total',
  prefixCacheQueries: 'vllm:prefix_cache_queries_total',
  running: 'vllm:num_requests_running',
  waiting: 'vllm:num_requests_waiting',
  promptTokens: 'vllm:prompt_tokens_total',
  generationTokens: 'vllm:generation_tokens_total',
} as const satisfies Record<keyof EngineMetrics, string>;

const count = z.number().finite().nonnegative();
const EngineMetricsSchema = z.strictObject({
  prefixCacheHits: count,
  prefixCacheQueries: count,
  running: count,
  waiting: count,
  promptTokens: count,
  generationTokens: count,
});

/** Sums of every sample of each metric name (labels ignored). */
export function parsePrometheus(text: string): Map<string, number> {
  const sums = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const value = Number(m[2]);
    if (!Number.isFinite(value)) continue;
    sums.set(m[1]!, (sums.get(m[1]!) ?? 0) + value);
  }
  return sums;
}

/** Null when the text has no vLLM series at all (not a vLLM /metrics page). */
export function engineMetricsFrom(text: string): EngineMetrics | null {
  const sums = parsePrometheus(text);
  if (![...sums.keys()].some((k) => k.startsWith('vllm:'))) return null;
  // Counters appear only after their first event: absent means 0.
  const raw = Object.fromEntries(Object.entries(SERIES).map(([key, name]) => [key, sums.get(name) ?? 0]));
  return EngineMetricsSchema.parse(raw);
}

export function prefixHitRate(m: EngineMetrics): number {
  return m.prefixCacheQueries > 0 ? m.prefixCacheHits / m.prefixCacheQueries : 0;
}
