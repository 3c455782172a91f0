// bench/overhead.ts's rollout worker as a process of its own (as `tempo-rl worker rollout` runs it):
//   node --import tsx bench/overhead-worker.ts CONFIG_JSON vllm|double
// vllm: the production worker (createRolloutWorker over the config's engines). double: the same
// worker with the no-op engine of part (b) (bench/overhead-direct.ts noOpEngine).
// Prints "worker-ready" once polling; SIGTERM shuts it down.
import { readFileSync } from 'node:fs';
import type { TempoConfig } from '../config/schema.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import { stateLayout } from '../stores/layout.js';
import { createRolloutWorker } from '../rollout/worker.js';
import { NO_OP_IMAGE_PROCESSOR, noOpEngine } from './overhead-direct.js';

const [cfgFile, mode] = process.argv.slice(2) as [string, 'vllm' | 'double'];
const cfg = JSON.parse(readFileSync(cfgFile, 'utf8')) as TempoConfig;
const engine = mode === 'double' ? noOpEngine() : null;
const worker = engine
  ? await createRolloutWorker(cfg, {
      cfg,
      store: new LocalBlobStore(stateLayout(cfg.state_dir).blobs),
      engines: () => engine,
      imageProcessor: NO_OP_IMAGE_PROCESSOR,
    })
  : await createRolloutWorker(cfg);
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => worker.shutdown());
const done = worker.run();
process.stdout.write('worker-ready\n');
await done;
process.exit(0);
