// The warm start's first answer, read off its distribution instead of sampled (prints numbers; not a
// test), on the train and the held-out split of the demo's dataset (testing/warmstart-probe.ts says
// what is read). Both splits should agree: a warm start that answers the train split better than the
// held-out one has learnt its problems, not the figure → answer rule.
//
//   node --import tsx bench/warmstart-probe.ts --engine URL [--model DIR]… [--config configs/cpu-tiny.yaml] [--json]
//
// URL: an engine serving the model to probe (e.g. `tempo-rl --set model.path=DIR --set
// engines.base_port=8200 engine start` with a state dir of its own). Each --model DIR (a model
// directory of the same architecture, e.g. the SFT run's checkpoints) is loaded into that engine in
// turn and probed: the warm start step by step.
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../config/load.js';
import { VllmClient } from '../engine/client.js';
import { stateLayout } from '../stores/layout.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import { syncEngineWeights } from '../testing/engines.js';
import { probeFirstAnswer } from '../testing/warmstart-probe.js';

const { values } = parseArgs({
  options: {
    engine: { type: 'string' },
    config: { type: 'string', default: 'configs/cpu-tiny.yaml' },
    model: { type: 'string', multiple: true, default: [] },
    json: { type: 'boolean', default: false },
  },
});
if (!values.engine) throw new Error('--engine URL is required');
const cfg = loadConfig({ file: values.config, env: process.env });
const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
const client = new VllmClient({ url: values.engine });

async function probe(): Promise<Record<string, unknown>> {
  return {
    train: await probeFirstAnswer(client, cfg, store, 'train'),
    eval: await probeFirstAnswer(client, cfg, store, 'eval'),
  };
}

const models = values.model.length ? values.model : [null];
for (const [i, dir] of models.entries()) {
  // the trainer's own weight sync: reload, then both caches reset (the prefix cache and the image
  // features computed by the previous weights), labelled with the model's place in the list
  if (dir) syncEngineWeights([client.url], path.resolve(dir), i + 1);
  const result = { model: dir, ...(await probe()) };
  if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else for (const [k, v] of Object.entries(result)) process.stdout.write(`${k}: ${JSON.stringify(v)}\n`);
}
