// The GPUs this machine shows, counted before anything is started for a config that asks for GPUs:
// model.num_gpus 1 on a machine with none used to be accepted and fail deep inside the trainer or an
// engine's start.
import { readdirSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import type { TempoConfig } from '../config/schema.js';

/** How many NVIDIA GPUs this process can use, and how that was told (for messages). */
export function visibleGpus(env: NodeJS.ProcessEnv = process.env): { count: number; seen: string } {
  const listed = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8', timeout: 30_000 });
  let count: number;
  let seen: string;
  if (listed.error && (listed.error as NodeJS.ErrnoException).code === 'ENOENT') {
    // no nvidia-smi on PATH: the driver's own list, if there is a driver
    count = (() => {
      try {
        return readdirSync('/proc/driver/nvidia/gpus').length;
      } catch {
        return 0;
      }
    })();
    seen = count ? `${count} in /proc/driver/nvidia/gpus (no nvidia-smi on PATH)` : 'no NVIDIA driver (no nvidia-smi)';
  } else if (listed.status !== 0) {
    count = 0;
    seen = `nvidia-smi -L failed: ${(listed.error?.message ?? listed.stderr ?? '').trim().split('\n')[0]}`;
  } else {
    count = listed.stdout.split('\n').filter((l) => l.startsWith('GPU ')).length;
    seen = `nvidia-smi lists ${count}`;
  }
  const visible = env.CUDA_VISIBLE_DEVICES;
  if (visible !== undefined) {
    const ids = visible.split(',').map((d) => d.trim());
    const usable = visible.trim() === '' || ids[0]!.startsWith('-') ? 0 : Math.min(count, ids.length);
    return { count: usable, seen: `${seen}; CUDA_VISIBLE_DEVICES=${JSON.stringify(visible)}` };
  }
  return { count, seen };
}

/** Refuses a config whose trainer asks for more GPUs than this machine shows (a usage error). */
export function checkGpus(cfg: TempoConfig, env: NodeJS.ProcessEnv = process.env): void {
  if (cfg.model.num_gpus === 0) return;
  const gpus = visibleGpus(env);
  if (gpus.count < cfg.model.num_gpus)
    throw Object.assign(
      new Error(
        `model.num_gpus is ${cfg.model.num_gpus}, but this machine shows ${gpus.count === 0 ? 'no GPU' : `${gpus.count}`} (${gpus.seen}); set model.num_gpus=0 to run on CPU`,
      ),
      { exitCode: 2 },
    );
}
