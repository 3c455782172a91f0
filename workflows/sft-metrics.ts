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

/** The share of the steps after the warm-up over which `wsd` decays. */
export const WSD_DECAY_SHARE = 0.2;

/** The learning rate of a step: after a linear warm-up of `warmup` steps, constant; cosine from `lr`
 *  (at the first step after the warm-up) down to lr/10 at the last step; or wsd (warm-up, stable,
 *  decay): constant, then linearly down to lr/10 over the last WSD_DECAY_SHARE of the steps, so the
 *  run ends on an average of its last updates rather than on the last few batches. */
export function scheduledLr(
  lr: number,
  schedule: 'constant' | 'cosine' | 'wsd' | undefined,
  step: number,
  steps: number,
  warmup = 0,
): number {
  if (step < warmup) return (lr * (step + 1)) / (warmup + 1);
  if ((schedule !== 'cosine' && schedule !== 'wsd') || steps - warmup <= 1) return lr;
  const t = Math.min(1, (step - warmup) / (steps - 1 - warmup));
  if (schedule === 'wsd') {
    const decay = Math.max(0, (t - (1 - WSD_DECAY_SHARE)) / WSD_DECAY_SHARE);
    return lr * (1 - 0.9 * Math.min(1, decay));
  }
  return lr * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * t)));
}
