// A trainingRun on Temporal's TestWorkflowEnvironment (a local dev server from the temporal binary the
// bootstrap installs) with the real workflows and rollout activities, an EngineDouble for the engines
// and stand-in trainer activities (train_step / sync_weights / log_metrics) on the trainer task
// queue. Latencies are configurable, so the same harness runs the workflow tests in seconds and
// simulates GPU-sized step times for bench/overlap.ts.
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type InjectedSinks } from '@temporalio/worker';
import { createActivities, type RolloutActivities } from '../activities/index.js';
import type { EngineGenerated, EngineGenerateRequest } from '../activities/episode-engines.js';
import { loadConfig } from '../config/load.js';
import type { TempoConfig } from '../config/schema.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import type { SyncWeightsInput, SyncWeightsOutput, TrainStepInput, TrainStepOutput } from '../lib/contract.js';
import { temporalBin } from '../base/paths.js';
import { stateLayout } from '../stores/layout.js';
import { initialRunState } from '../config/run-plan.js';
import { cachedWorkflowBundle } from '../rollout/workflow-bundle.js';
import { installTemporalRuntime } from '../rollout/temporal-runtime.js';
import { WORKFLOWS_PATH } from '../rollout/worker.js';
import { WORKFLOW_TASK_TIMEOUT } from '../protocol/episode.js';
import {
  STATUS_ATTR,
  STEP_ATTR,
  trainingRunWorkflowId,
  type RunResult,
  type RunSinks,
  type RunState,
} from '../protocol/training-run.js';
import { EngineDouble, tokenizeText, toolCall, type ScriptedTurn } from './episode-engine-double.js';
import { removeTestState } from './state.js';

export interface Latency {
  /** Each generate call. */
  generate_ms: number;
  /** Each read of a step's prompts (the episodePrompts activity); 0 when not given. */
  prompts_ms?: number;
  train_ms: number;
  sync_ms: number;
}

/** What the stand-ins saw, with wall-clock times (ms since the epoch). */
export interface Trace {
  generates: Array<{ episode_id: string; start: number; end: number; weight_version: number }>;
  trains: Array<{
    step: number;
    start: number;
    end: number;
    samples: string[];
    data_cursor: TrainStepInput['data_cursor'];
  }>;
  syncs: Array<{ weight_version: number; pause_mode: string | undefined; start: number; end: number }>;
}

export interface StandinRuns {
  env: TestWorkflowEnvironment;
  client: Client;
  cfg: TempoConfig;
  trace: Trace;
  latency: Latency;
  /** Decides each generate call's turn (default: a right answer for sample 0 of a group, a wrong one otherwise). */
  script: (req: EngineGenerateRequest, call: number) => ScriptedTurn;
  /** The initial state of a run under this harness's config plus `sets`. */
  plan(runId: string, sets?: string[]): RunState;
  start(state: RunState): Promise<void>;
  result(runId: string): Promise<RunResult>;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The weights the stand-in engine serves, moved by the stand-in sync_weights. */
class StandinEngine extends EngineDouble {
  version = 0;
  constructor(private readonly runs: { latency: Latency; trace: Trace; script: StandinRuns['script'] }) {
    super((req, call) => ({ ...runs.script(req, call), weight_version: this.version }), 12, ['http://standin-engine']);
  }

  override async generate(req: EngineGenerateRequest): Promise<EngineGenerated> {
    const start = Date.now();
    await sleep(this.runs.latency.generate_ms);
    const out = await super.generate(req);
    this.runs.trace.generates.push({
      episode_id: req.session_id,
      start,
      end: Date.now(),
      weight_version: this.version,
    });
    return out;
  }

  /** SFT tokenizes its records' assistant turns. */
  async tokenize(text: string): Promise<number[]> {
    return tokenizeText(text);
  }
}

const defaultScript: StandinRuns['script'] = (req) => {
  const sample = Number(req.session_id.split('/').at(-1));
  // The synthetic task's labels are small integers; "60" is right for some prompts, "7" for none.
  return { text: toolCall(sample % 2 === 0 ? '60' : '7') };
};

/** The rollout activities with each read of a step's prompts held `latency.prompts_ms` first. */
function slowPrompts(acts: RolloutActivities, latency: Latency): RolloutActivities {
  const read = acts.episodePrompts.bind(acts);
  return {
    ...acts,
    episodePrompts: async (input) => {
      await sleep(latency.prompts_ms ?? 0);
      return read(input);
    },
  };
}

export async function startStandinRuns(
  sets: string[] = [],
  latency: Latency = { generate_ms: 0, train_ms: 50, sync_ms: 10 },
): Promise<StandinRuns> {
  installTemporalRuntime();
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: temporalBin() },
      searchAttributes: [STATUS_ATTR, STEP_ATTR],
      extraArgs: ['--log-level', 'error'],
    },
  });
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-standins-'));
  const baseSets = [
    `state_dir=${stateDir}`,
    'engines.urls=["http://standin-engine"]',
    'run.trainer_standbys=0',
    'dataset.kind=synthetic',
    'dataset.synthetic_task=angle_facts',
    'dataset.synthetic_size=48',
    'rollout.prompts_per_step=2',
    'rollout.n_samples_per_prompt=2',
    'rollout.max_turns=2',
    'rollout.max_response_len=400',
    'rollout.concurrency=4',
    'run.steps=3',
    'run.empty_step_wait_s=0',
    ...sets,
  ];
  const cfg = loadConfig({ env: {}, sets: baseSets });
  const trace: Trace = { generates: [], trains: [], syncs: [] };
  const runs = { latency, trace, script: defaultScript };
  const engine = new StandinEngine(runs);
  const store = new LocalBlobStore(stateLayout(cfg.state_dir).blobs);
  let version = 0;
  const trainer = {
    async train_step(input: TrainStepInput): Promise<TrainStepOutput> {
      const start = Date.now();
      await sleep(runs.latency.train_ms);
      trace.trains.push({
        step: input.step,
        start,
        end: Date.now(),
        samples: input.samples.map((s) => s.ref),
        data_cursor: input.data_cursor,
      });
      version = input.step + 1;
      return {
        step: input.step,
        weight_version: version,
        checkpoint: `standin-checkpoint-${version}`,
        already_committed: false,
        // an engine that drifts from step 1 on (grpo.max_logprob_diff's alarm, default 0.05)
        metrics: {
          'train/loss': 0,
          'train/n_samples': input.samples.length,
          'train/train_rollout_logprob_abs_diff': input.step === 0 ? 0.01 : 0.2,
        },
      };
    },
    async sync_weights(input: SyncWeightsInput): Promise<SyncWeightsOutput> {
      const start = Date.now();
      await sleep(runs.latency.sync_ms);
      engine.version = input.weight_version;
      trace.syncs.push({ weight_version: input.weight_version, pause_mode: input.pause_mode, start, end: Date.now() });
      return {
        weight_version: input.weight_version,
        engines: input.engines.map((url) => ({ url, ok: true, seconds: 0 })),
      };
    },
    async log_metrics(): Promise<{ tensorboard: string; wandb: boolean }> {
      return { tensorboard: '', wandb: false };
    },
  };
  const bundle = await cachedWorkflowBundle(WORKFLOWS_PATH);
  const rolloutWorker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: cfg.temporal.task_queues.rollout,
    workflowBundle: bundle,
    activities: slowPrompts(
      createActivities({
        cfg,
        store,
        engines: () => engine,
        imageProcessor: { patch_size: 16, merge_size: 2, min_pixels: 1024, max_pixels: 16384 },
      }),
      runs.latency,
    ),
    maxConcurrentActivityTaskExecutions: 256,
    // The run's kill-point sink, with no point to fire (an unregistered sink logs an error a call).
    sinks: { killPoints: { reach: { fn: () => undefined } } } satisfies InjectedSinks<RunSinks>,
  });
  const trainerWorker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: cfg.temporal.task_queues.trainer,
    activities: trainer,
  });
  const running = [rolloutWorker.run(), trainerWorker.run()];
  return {
    env,
    client: env.client,
    cfg,
    trace,
    latency,
    get script() {
      return runs.script;
    },
    set script(s) {
      runs.script = s;
    },
    plan: (runId, more = []) => initialRunState(loadConfig({ env: {}, sets: [...baseSets, ...more] }), runId),
    async start(state) {
      await env.client.workflow.start('trainingRun', {
        taskQueue: cfg.temporal.task_queues.rollout,
        workflowId: trainingRunWorkflowId(state.run_id),
        workflowTaskTimeout: WORKFLOW_TASK_TIMEOUT,
        args: [state],
      });
    },
    async result(runId) {
      return (await env.client.workflow.getHandle(trainingRunWorkflowId(runId)).result()) as RunResult;
    },
    async close() {
      rolloutWorker.shutdown();
      trainerWorker.shutdown();
      await Promise.allSettled(running);
      await env.teardown();
      removeTestState(stateDir);
    },
  };
}
