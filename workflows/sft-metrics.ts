// Pure step statistics of an SFT step, and metric renaming (used inside the trainingRun workflow).
export function sftMetrics(batch: { samples: Array<{ response_len: number; mask_sum: number }>; skipped: unknown[] }): Record<string, number> {
  return {
    'sft/records': batch.samples.length,
    'sft/skipped': batch.skipped.length,
    'sft/loss_tokens': batch.samples.reduce((a, s) => a + s.mask_sum, 0),
    'rollout/response_len': batch.samples.length ? batch.samples.reduce((a, s) => a + s.response_len, 0) / batch.samples.length : 0,
  };
}

/** {"eval/reward": 1} → {"eval_start/reward": 1}. */
export function prefixed(metrics: Record<string, number>, from: string, to: string): Record<string, number> {
  return Object.fromEntries(Object.entries(metrics).map(([k, v]) => [k.startsWith(`${from}/`) ? `${to}/${k.slice(from.length + 1)}` : k, v]));
}
