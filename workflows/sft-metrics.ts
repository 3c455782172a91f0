// Pure step statistics of an SFT step, and metric renaming (used inside the trainingRun workflow).
export function sftMetrics(batch: {
  samples: Array<{ response_len: number; mask_sum: number }>;
  skipped: unknown[];
}): Record<string, number> {
  return {
    'sft/records': batch.samples.length,
    'sft/skipped': batch.skipped.length,
    'sft/loss_tokens': batch.samples.reduce((a, s) => a + s.mask_sum, 0),
    'rollout/response_len': batch.samples.length
      ? batch.samples.reduce((a, s) => a + s.response_len, 0) / batch.samples.length
      : 0,
  };
}

/** {"eval/reward": 1} → {"eval_start/reward": 1}. */
export function prefixed(metrics: Record<string, number>, from: string, to: string): Record<string, number> {
  return Object.fromEntries(
    Object.entries(metrics).map(([k, v]) => [k.startsWith(`${from}/`) ? `${to}/${k.slice(from.length + 1)}` : k, v]),
  );
}

/** The learning rate of a step: after a linear warm-up of `warmup` steps, constant or cosine from `lr`
 *  (at the first step after the warm-up) down to lr/10 at the last step. */
export function scheduledLr(
  lr: number,
  schedule: 'constant' | 'cosine' | undefined,
  step: number,
  steps: number,
  warmup = 0,
): number {
  if (step < warmup) return (lr * (step + 1)) / (warmup + 1);
  if (schedule !== 'cosine' || steps - warmup <= 1) return lr;
  const t = Math.min(1, (step - warmup) / (steps - 1 - warmup));
  return lr * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * t)));
}
