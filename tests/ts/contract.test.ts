// The TS ↔ Python wire contract, checked by both sides: payloads the workflow builds pass the
// Python pydantic models, and payloads the Python side builds pass the TS zod schemas.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { HYPER_DEFAULTS_FILE, hyperDefaultsJson } from '../../config/hyper-defaults.js';
import {
  Sample,
  SyncWeightsInput,
  SyncWeightsOutput,
  TrainHyper,
  TrainStepInput,
  TrainStepOutput,
} from '../../lib/contract.js';
import { pythonBin, REPO_ROOT } from '../../base/paths.js';
import { initialRunState } from '../../config/run-plan.js';
import type { RunPlan } from '../../protocol/training-run.js';

function python(script: string, input: unknown): unknown {
  const res = spawnSync(pythonBin(), ['-c', script], {
    input: JSON.stringify(input),
    encoding: 'utf8',
    cwd: REPO_ROOT,
    env: { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers') },
  });
  assert.equal(res.status, 0, res.stderr);
  return JSON.parse(res.stdout);
}

/** The fields of a train step that the workflow takes from the plan (workflows/train-step.ts). */
function stepFields(plan: RunPlan) {
  return {
    algorithm: plan.algorithm,
    keep_checkpoints: plan.keep_checkpoints,
    keep_checkpoint_every: plan.keep_checkpoint_every,
    checkpoint_interval: plan.checkpoint_interval,
    full_checkpoint: false,
    deterministic: plan.deterministic,
    seed: plan.seed,
  };
}

const VALIDATE = `
import json, sys
from trainer import contract
doc = json.load(sys.stdin)
out = {}
for name, payload in doc.items():
    try:
        getattr(contract, name).model_validate(payload)
        out[name] = "ok"
    except Exception as err:
        out[name] = str(err).splitlines()[0]
print(json.dumps(out))
`;

test('what the workflow sends, Python accepts; a stray key is refused on both sides', () => {
  const state = initialRunState(loadConfig({ env: {}, sets: ['state_dir=/tmp/contract'] }), 'r1');
  const train = TrainStepInput.parse({
    run_id: 'r1',
    step: 0,
    run_dir: state.plan.run_dir,
    blob_store: state.plan.blob_store,
    model_path: state.plan.model_path,
    samples: [{ ref: 'blob:named/samples/r1/0/0/0.json', reward: 1, group_id: 'r1/0/0' }],
    hyper: state.plan.hyper,
    data_cursor: { epoch: 0, cursor: 2 },
    ...stepFields(state.plan),
  });
  const sync = SyncWeightsInput.parse({
    run_id: 'r1',
    weight_version: 1,
    checkpoint: '/tmp/c',
    engines: ['http://127.0.0.1:8100'],
    pause_mode: 'wait',
    ...state.plan.weights,
    wake_engines: false,
  });
  const bad = { ...train, hyper: { ...train.hyper, lr_typo: 1 } };
  assert.equal(TrainStepInput.safeParse(bad).success, false);
  const verdict = python(VALIDATE, { TrainStepInput: train, SyncWeightsInput: sync, Hyper: bad.hyper });
  assert.deepEqual(Object.keys(verdict as object).sort(), ['Hyper', 'SyncWeightsInput', 'TrainStepInput']);
  assert.equal((verdict as Record<string, string>).TrainStepInput, 'ok');
  assert.equal((verdict as Record<string, string>).SyncWeightsInput, 'ok');
  assert.match((verdict as Record<string, string>).Hyper!, /validation error/);
});

test("the trainer's hyper-parameter defaults are the config's: the checked-in file is what config/hyper-defaults.ts writes", () => {
  assert.equal(
    readFileSync(HYPER_DEFAULTS_FILE, 'utf8'),
    hyperDefaultsJson(),
    'stale: run node --import tsx config/hyper-defaults.ts',
  );
  const defaults = python(
    `
import json, sys
from trainer import contract
print(contract.Hyper().model_dump_json())`,
    {},
  );
  assert.deepEqual(defaults, TrainHyper.parse({}), 'Hyper() is TrainHyper.parse({}), field by field');
});

test('a sync always names its pause mode (the workflow decides it; neither side has a default); the clip order is checked on both sides', () => {
  const sync = {
    run_id: 'r1',
    weight_version: 1,
    checkpoint: '/tmp/c',
    engines: ['http://e'],
    transport: 'disk',
    wake_engines: false,
    engine_dtype: 'float32',
    ipc_bucket_mb: 1024,
    ipc_load: 'auto',
  };
  assert.equal(SyncWeightsInput.safeParse(sync).success, false);
  const hyper = { ...TrainHyper.parse({}), eps_clip: 0.3, eps_clip_high: 0.2 };
  assert.equal(TrainHyper.safeParse(hyper).success, false);
  const verdict = python(VALIDATE, { SyncWeightsInput: sync, Hyper: hyper }) as Record<string, string>;
  assert.match(verdict.SyncWeightsInput!, /validation error/);
  assert.match(verdict.Hyper!, /validation error/);
});

test('the store travels as blob_store (a URI); blob_root is no field; without blob_store a step is refused on both sides', () => {
  const state = initialRunState(
    loadConfig({ env: {}, sets: ['state_dir=/tmp/contract', 'blobs.uri=s3://tempo-bucket/runs'] }),
    'r1',
  );
  assert.equal(state.plan.blob_store, 's3://tempo-bucket/runs');
  const base = {
    run_id: 'r1',
    step: 0,
    run_dir: state.plan.run_dir,
    model_path: state.plan.model_path,
    samples: [{ ref: 'blob:named/samples/r1/0/0/0.json', reward: 1, group_id: 'r1/0/0' }],
    hyper: state.plan.hyper,
    data_cursor: { epoch: 0, cursor: 2 },
    ...stepFields(state.plan),
  };
  const s3 = TrainStepInput.parse({ ...base, blob_store: state.plan.blob_store });
  const root = { ...base, blob_root: '/tmp/contract/blobs' };
  assert.equal(TrainStepInput.safeParse(root).success, false);
  assert.equal(TrainStepInput.safeParse(base).success, false);
  const verdict = python(VALIDATE.replace('getattr(contract, name)', 'getattr(contract, "TrainStepInput")'), {
    s3,
    root,
    neither: base,
  }) as Record<string, string>;
  assert.equal(verdict.s3, 'ok');
  assert.match(verdict.root!, /validation error/);
  assert.match(verdict.neither!, /validation error/);
});

test('what Python returns, TS accepts', () => {
  const out = python(
    `
import json, sys
from trainer import contract
print(json.dumps({
  "train": contract.TrainStepOutput(step=0, weight_version=1, checkpoint="/c", already_committed=False,
                                    metrics={"train/pg_loss": 0.5}).model_dump(),
  "sync": contract.SyncWeightsOutput(weight_version=1, engines=[contract.EngineSyncResult(url="http://e", ok=True, seconds=0.2)]).model_dump(),
}))`,
    {},
  ) as Record<string, unknown>;
  assert.equal(TrainStepOutput.parse(out.train).weight_version, 1);
  assert.equal(SyncWeightsOutput.parse(out.sync).engines[0]!.ok, true);
});

test('a sample names its environment; samples stored before it (no environment) still parse on both sides', () => {
  const sample: Sample = {
    schema_version: 1,
    episode_id: 'r/0/0/0',
    run_id: 'r',
    step: 0,
    prompt_index: 0,
    sample_index: 0,
    group_id: 'r/0/0',
    prompt_ids: [1, 2, 3],
    response_ids: [4, 5],
    loss_mask: [1, 0],
    rollout_logprobs: [-0.5, 0],
    images: [],
    reward: 1,
    status: 'COMPLETED',
    truncated_reason: null,
    temperature: 1,
    label: '44',
    environment: 'arithmetic',
    turns: [
      {
        engine: 'e',
        weight_version: 0,
        generated_tokens: 2,
        observation_tokens: 0,
        finish_reason: 'stop',
        tool_answer: '44',
        tool_score: 1,
      },
    ],
    routed_experts: null,
  };
  const { environment: _, ...before } = sample;
  assert.equal(Sample.parse(sample).environment, 'arithmetic');
  assert.equal(Sample.parse(before).environment, undefined);
  assert.equal(Sample.safeParse({ ...sample, environment: 3 }).success, false);
  const verdict = python(
    `
import json, sys
from trainer import contract
doc = json.load(sys.stdin)
print(json.dumps({k: contract.Sample.model_validate(v).environment for k, v in doc.items()}))`,
    { sample, before },
  ) as Record<string, string | null>;
  assert.deepEqual(verdict, { sample: 'arithmetic', before: null });
});
