// Both environments on a live vLLM engine (the tiny random Qwen3-VL): an episode of each runs end to
// end through the real template and stores its sample with the environment's name. Geo3K's prompt
// has its image; the arithmetic episode is text only (no image part, no image token, no image in the
// sample). Its first two turns are scripted calculator calls, tokenized by the engine, the second
// reading the `ans` the first left in the state; the last turn is the engine's own.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { defaultEpisodeDeps } from '../../activities/episode.js';
import type { EpisodeEngines } from '../../activities/episode-engines.js';
import type { EnvStepActivityResult } from '../../protocol/activities.js';
import { DatasetConfig, RolloutConfig } from '../../config/schema.js';
import { activityCalls, auditEpisode } from '../../client/audit.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { Sample } from '../../lib/contract.js';
import { loadDataset } from '../../lib/data/load.js';
import { getEnvironment } from '../../lib/env/registry.js';
import { tinyModelDir } from '../../base/paths.js';
import { stateLayout } from '../../stores/layout.js';
import { connectClient } from '../../supervise/temporal.js';
import { VllmClient } from '../../engine/index.js';
import { episode } from '../../workflows/episode.js';
import {
  episodeSettings,
  episodeStartOptions,
  type EpisodeInput,
  type EpisodeSummary,
} from '../../protocol/episode.js';
import { engineWeightVersion, IMAGE_PAD_ID, testEngines, type TestEngines } from '../../testing/engines.js';
import { recordHistory } from '../../testing/history-fixtures.js';
import { startRolloutWorker, startTestServer, type RunningWorker, type TestServer } from '../../testing/temporal.js';

const skip = existsSync(path.join(tinyModelDir(), 'config.json'))
  ? false
  : `no tiny model at ${tinyModelDir()} (source scripts/bootstrap.sh)`;

let engines: TestEngines;
let server: TestServer;
let worker: RunningWorker;
let client: Client;
let store: LocalBlobStore;
let vllm: VllmClient;
/** Scripted turns by episode id: the n-th generate of that episode answers the n-th text. */
const scripts = new Map<string, string[]>();

before(async () => {
  if (skip) return;
  engines = await testEngines(1);
  server = await startTestServer([`engines.urls=[${engines.urls.join(',')}]`, 'engines.request_timeout_s=120']);
  store = new LocalBlobStore(stateLayout(server.cfg.state_dir).blobs);
  const deps = defaultEpisodeDeps(server.cfg);
  const real = deps.engines();
  vllm = new VllmClient({ url: engines.urls[0]! });
  const served = new Map<string, number>();
  const scripted: EpisodeEngines = {
    render: real.render.bind(real),
    detokenize: real.detokenize.bind(real),
    tokenConventions: real.tokenConventions.bind(real),
    async generate(req) {
      const n = served.get(req.session_id) ?? 0;
      served.set(req.session_id, n + 1);
      const text = scripts.get(req.session_id)?.[n];
      if (text === undefined) return real.generate(req);
      const ids = await vllm.tokenize(text);
      return {
        engine: 'scripted',
        token_ids: ids,
        logprobs: ids.map(() => -1),
        finish_reason: 'stop',
        stop_reason: '</tool_call>',
        routed_experts: null,
        weight_version: null,
      };
    },
  };
  worker = await startRolloutWorker(server.cfg, { cfg: server.cfg, store, ...deps, engines: () => scripted });
  client = await connectClient(server.cfg);
});

after(async () => {
  await client?.connection.close();
  await worker?.stop();
  await server?.stop();
  await engines?.stop();
});

/** One episode of `environment` on the first synthetic row of its default task, as a training run starts it. */
async function runEpisode(environment: string, runId: string, maxResponseLen: number, script: string[] = []) {
  const env = getEnvironment(environment);
  const rollout = RolloutConfig.parse({ environment, max_turns: 3, max_response_len: maxResponseLen, seed: 3 });
  const settings = episodeSettings(rollout, { env, generate_timeout_s: 120 });
  const [row] = (
    await loadDataset(DatasetConfig.parse({ kind: 'synthetic', synthetic_size: 1 }), 'train', store, environment)
  ).rows;
  const prompt = env.prompt(row!, { tools: true });
  // The suite's engines may serve a later version (an earlier file synced weights): run on what they serve.
  const served = Number(await engineWeightVersion(vllm.url));
  const weight_version = Number.isInteger(served) && served >= 0 ? served : 0;
  const input: EpisodeInput = {
    run_id: runId,
    step: 0,
    prompt_index: 0,
    sample_index: 0,
    prompt,
    label: row!.answer,
    env_state: env.initialState(row!),
    settings,
    weight_version,
  };
  const id = `${runId}/0/0/0`;
  scripts.set(id, script);
  const opts = episodeStartOptions(id);
  const summary: EpisodeSummary = await client.workflow.execute(episode, {
    taskQueue: server.cfg.temporal.task_queues.rollout,
    ...opts,
    args: [input],
  });
  const sample = Sample.parse(await store.getJson(summary.sample_ref));
  const calls = activityCalls(await client.workflow.getHandle(opts.workflowId).fetchHistory());
  return { id, summary, sample, calls, workflowId: opts.workflowId };
}

const imageTokensOf = (r: Awaited<ReturnType<typeof runEpisode>>) =>
  (r.calls.find((c) => c.type === 'renderPrompt')!.result as { image_tokens: { in_prompt: number } }).image_tokens
    .in_prompt;

test('a Geo3K episode on the live engine: its image in the prompt, its sample named geo3k', {
  skip,
  timeout: 300_000,
}, async () => {
  const r = await runEpisode('geo3k', 'envs-live-geo3k', 48);
  assert.ok(['COMPLETED', 'TRUNCATED'].includes(r.summary.status), `${r.summary.status} ${r.summary.truncated_reason}`);
  assert.equal(r.sample.environment, 'geo3k');
  assert.equal(r.sample.images.length, 1);
  assert.ok(imageTokensOf(r) > 0);
  assert.equal(r.sample.prompt_ids.filter((t) => t === IMAGE_PAD_ID).length, imageTokensOf(r));
  assert.equal((await auditEpisode(client, store, r.id)).environment, 'geo3k');
});

test("an arithmetic episode on the live engine: text only, the calculator's state carried between turns", {
  skip,
  timeout: 300_000,
}, async () => {
  const calc = (expression: string) =>
    `<tool_call>\n{"name": "calculator", "arguments": {"expression": "${expression}"}}\n</tool_call>`;
  // room for the two scripted turns and their observations (~110 tokens), then a short turn of the engine's
  const r = await runEpisode('arithmetic', 'envs-live-arithmetic', 160, [calc('(14 + 9) * 3'), calc('ans - 25')]);
  assert.ok(['COMPLETED', 'TRUNCATED'].includes(r.summary.status), `${r.summary.status} ${r.summary.truncated_reason}`);
  assert.equal(r.summary.turns, 3);
  assert.deepEqual(
    r.sample.turns.map((t) => t.engine === 'scripted'),
    [true, true, false],
    "the last turn is the engine's",
  );
  assert.ok(r.sample.turns[2]!.generated_tokens > 0);
  assert.equal(r.sample.environment, 'arithmetic');
  assert.deepEqual(r.sample.images, []);
  assert.equal(imageTokensOf(r), 0);
  assert.equal(r.sample.prompt_ids.includes(IMAGE_PAD_ID), false);
  assert.match(
    await vllm.detokenize(r.sample.prompt_ids),
    /"name": "calculator"/,
    'the tools are in the rendered prompt',
  );
  // envStep and renderObservation are local activities: the history keeps their results, not their inputs
  const steps = r.calls.filter((c) => c.type === 'envStep').map((c) => c.result as EnvStepActivityResult);
  assert.equal(steps[0]!.observation, 'calculator: (14 + 9) * 3 = 69 (kept as ans)');
  assert.deepEqual(steps[0]!.state, { calls: [{ expression: '(14 + 9) * 3', value: '69', error: null }], ans: 69 });
  assert.match(
    steps[1]!.observation!,
    /^calculator: ans - 25 = 44 \(kept as ans\) This is your last turn/,
    'the second step started from the state the first returned',
  );
  assert.equal(r.calls.filter((c) => c.type === 'renderObservation').length, 2);
  const audit = await auditEpisode(client, store, r.id);
  assert.deepEqual(
    audit.turns.slice(0, 2).map((t) => t.observation),
    [steps[0]!.observation, steps[1]!.observation],
  );
  assert.equal(audit.environment, 'arithmetic');
  await recordHistory(client, r.workflowId, 'episode-live-arithmetic-calculator');
});
