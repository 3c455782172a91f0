// The episode workflow against live vLLM engines (the tiny random Qwen3-VL) on real Geo3K problems:
// token-exact stitching, lengths and masks, masked spans that decode to the template's user turn,
// image placeholders, and the termination paths a random model can take for real (budget
// exhausted, stop string without EOS, no tool call). A tool-using second turn is reached with a
// scripted first turn (tokenized by the engine itself); every later token is the engine's.
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { defaultEpisodeDeps } from '../../activities/episode.js';
import type { EpisodeEngines } from '../../activities/episode-engines.js';
import { TurnOutput } from '../../activities/generate.js';
import { loadStoredPrompt } from '../../activities/render.js';
import { loadTrajectory } from '../../activities/trajectory-store.js';
import { RolloutConfig } from '../../config/schema.js';
import { activityCalls, auditEpisode, largestPayloadBytes } from '../../client/audit.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { Sample } from '../../lib/contract.js';
import { buildMessages, loadDataset, type PromptRow } from '../../lib/data/index.js';
import { startEngines, stopEngines } from '../../supervise/engines.js';
import { REPO_ROOT, tinyModelDir } from '../../base/paths.js';
import { stateLayout } from '../../stores/layout.js';
import { portOpen } from '../../supervise/process.js';
import { connectClient } from '../../supervise/temporal.js';
import { maskedSpans } from '../../lib/trajectory.js';
import { episode } from '../../workflows/episode.js';
import {
  episodeSettings,
  episodeStartOptions,
  type EpisodeInput,
  type EpisodeSettings,
  type EpisodeSummary,
} from '../../protocol/episode.js';
import { recordHistory } from '../../testing/history-fixtures.js';
import { startRolloutWorker, startTestServer, type RunningWorker, type TestServer } from '../../testing/temporal.js';

const GEO3K = path.resolve(REPO_ROOT, '..', 'shared', 'data', 'geo3k');
const IMAGE_PAD = 151655;
const skip = !existsSync(path.join(GEO3K, 'test.jsonl'))
  ? `no Geo3K data at ${GEO3K}`
  : !existsSync(path.join(tinyModelDir(), 'config.json'))
    ? `no tiny model at ${tinyModelDir()} (source scripts/bootstrap.sh)`
    : false;
if (skip) console.log(`# SKIP episode-live: ${skip}`);

let server: TestServer;
let worker: RunningWorker;
let client: Client;
let store: LocalBlobStore;
let engines: EpisodeEngines;
let rows: PromptRow[] = [];
let stopOwnEngines: (() => Promise<unknown>) | null = null;
let firstTurnScript: string | null = null;

/** Engine URLs: the suite's (TEMPO_RL_TEST_ENGINE_URLS), else one engine of ours on 8200-8299. */
async function engineUrlsForTest(): Promise<string[]> {
  const fromEnv = (process.env.TEMPO_RL_TEST_ENGINE_URLS ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (fromEnv.length) return fromEnv;
  let port = 8200;
  while (await portOpen('127.0.0.1', port, 300)) port++;
  assert.ok(port < 8300, 'no free port in 8200-8299');
  const { loadConfig } = await import('../../config/load.js');
  const cfg = loadConfig({
    sets: [
      `state_dir=${mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-ep-engines-'))}`,
      'engines.count=1',
      `engines.base_port=${port}`,
      'engines.urls=[]',
    ],
  });
  stopOwnEngines = () => stopEngines(cfg);
  const { statuses } = await startEngines(cfg);
  return statuses.map((s) => s.url);
}

/** A subset of the Geo3K test split (its images stay where they are). */
function geo3kSubset(n: number): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'geo3k-subset-'));
  const lines = readFileSync(path.join(GEO3K, 'test.jsonl'), 'utf8').split('\n').filter(Boolean).slice(0, n);
  const fixed = lines.map((l) => {
    const row = JSON.parse(l) as { images: string[] };
    return JSON.stringify({ ...row, images: row.images.map((p) => path.join(GEO3K, p)) });
  });
  writeFileSync(path.join(dir, 'test.jsonl'), `${fixed.join('\n')}\n`);
  copyFileSync(path.join(GEO3K, 'README.md'), path.join(dir, 'README.md'));
  return dir;
}

before(async () => {
  if (skip) return;
  const urls = await engineUrlsForTest();
  server = await startTestServer([`engines.urls=[${urls.join(',')}]`, 'engines.request_timeout_s=300']);
  store = new LocalBlobStore(stateLayout(server.cfg.state_dir).blobs);
  const deps = defaultEpisodeDeps(server.cfg);
  const real = deps.engines();
  engines = real;
  // Turn 1 scripted when asked (tokenized by the engine, so every id is the model's vocabulary).
  const scripted: EpisodeEngines = {
    ...real,
    render: real.render.bind(real),
    detokenize: real.detokenize.bind(real),
    tokenConventions: real.tokenConventions.bind(real),
    async generate(req) {
      const prompt = firstTurnScript;
      if (prompt === null || !req.session_id.includes('/scripted/')) return real.generate(req);
      const isFirst = !(await real.detokenize(req.token_ids)).includes('incorrect');
      if (!isFirst) return real.generate(req);
      const tokenize = (await import('../../engine/index.js')).VllmClient;
      const ids = await new tokenize({ url: server.cfg.engines.urls[0]! }).tokenize(prompt);
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
  const dataset = {
    ...server.cfg.dataset,
    kind: 'geo3k_dir' as const,
    path: geo3kSubset(8),
    image_roots: [GEO3K],
    eval_split: 'test',
  };
  rows = (await loadDataset(dataset, 'eval', store)).rows;
});

after(async () => {
  await client?.connection.close();
  await worker?.stop();
  await server?.stop();
  await stopOwnEngines?.();
});

function settings(over: Partial<RolloutConfig> = {}, opts: { stop?: string[] } = {}): EpisodeSettings {
  return episodeSettings(
    RolloutConfig.parse({ max_turns: 2, max_response_len: 48, temperature: 1.0, seed: 7, ...over }),
    { generate_timeout_s: 300, ...opts },
  );
}

async function runEpisode(row: PromptRow, runId: string, index: number, s: EpisodeSettings, sample = 0) {
  const built = buildMessages(row, { tools: s.multi_turn });
  const input: EpisodeInput = {
    run_id: runId,
    step: 0,
    prompt_index: index,
    sample_index: sample,
    prompt: { messages: built.messages, tools: built.tools },
    label: row.answer,
    settings: s,
    weight_version: 0,
  };
  const id = `${runId}/0/${index}/${sample}`;
  const opts = episodeStartOptions(id);
  const summary: EpisodeSummary = await client.workflow.execute(episode, {
    taskQueue: server.cfg.temporal.task_queues.rollout,
    ...opts,
    args: [input],
  });
  const sampleDoc = Sample.parse(await store.getJson(summary.sample_ref));
  const calls = activityCalls(await client.workflow.getHandle(opts.workflowId).fetchHistory());
  return { id, summary, sample: sampleDoc, calls, workflowId: opts.workflowId };
}

/** prompt + response == the canonical history of the last generate + its output (+ synthetic EOS),
 *  and the sample is the episode's last stitched trajectory (the blob the last turn left). */
async function assertTokenExact(r: Awaited<ReturnType<typeof runEpisode>>) {
  const gens = r.calls.filter((c) => c.type === 'generateTurn');
  const last = gens[gens.length - 1]!;
  const lastIn = last.input as { prompt_ref: string; trajectory_ref: string | null };
  const lastOut = last.result as { output_ref: string };
  const prompt = await loadStoredPrompt(store, lastIn.prompt_ref);
  const before =
    lastIn.trajectory_ref === null ? [] : (await loadTrajectory(store, lastIn.trajectory_ref)).trajectory.response_ids;
  const output = TurnOutput.parse(await store.getJson(lastOut.output_ref));
  const canonical = [...prompt.prompt_ids, ...before, ...output.token_ids];
  const full = [...r.sample.prompt_ids, ...r.sample.response_ids];
  assert.deepEqual(full.slice(0, canonical.length), canonical);
  assert.ok(full.length - canonical.length <= 1, 'at most a synthetic EOS after the last output');
  const steps = r.calls.filter(
    (c) => (c.type === 'generateTurn' || c.type === 'renderObservation') && c.outcome === 'completed',
  );
  const lastRef = (steps[steps.length - 1]!.result as { trajectory_ref: string }).trajectory_ref;
  const { trajectory } = await loadTrajectory(store, lastRef);
  assert.deepEqual(
    [r.sample.response_ids, r.sample.loss_mask, r.sample.rollout_logprobs],
    [trajectory.response_ids, trajectory.loss_mask, trajectory.logprobs],
    'the sample is the last stitched trajectory',
  );
  const n = r.sample.response_ids.length;
  assert.equal(r.sample.loss_mask.length, n);
  assert.equal(r.sample.rollout_logprobs.length, n);
  assert.equal(n, r.summary.response_len);
  assert.ok(n <= 48 || r.summary.turns > 1);
  for (const [s, e] of maskedSpans(r.sample.loss_mask)) {
    const text = await engines.detokenize(r.sample.response_ids.slice(s, e));
    assert.match(
      text,
      /^(<\|im_end\|>)?(\n<\|im_start\|>user\n[\s\S]*<\|im_end\|>\n<\|im_start\|>assistant\n)?$/,
      `masked span: ${JSON.stringify(text)}`,
    );
    assert.ok(text.length > 0);
  }
}

test('many real Geo3K episodes: token-exact, lengths equal, masks right, image placeholders match', {
  skip,
  timeout: 900_000,
}, async () => {
  const results = [];
  for (let i = 0; i < rows.length; i++) results.push(await runEpisode(rows[i]!, 'live-many', i, settings()));
  for (const r of results) {
    await assertTokenExact(r);
    assert.ok(
      ['COMPLETED', 'TRUNCATED'].includes(r.summary.status),
      `${r.id}: ${r.summary.status} ${r.summary.truncated_reason}`,
    );
    const rendered = r.calls.find((c) => c.type === 'renderPrompt')!.result as {
      image_tokens: { in_prompt: number; expected: number; engine_reported: number };
    };
    assert.ok(rendered.image_tokens.in_prompt > 0);
    assert.equal(rendered.image_tokens.in_prompt, rendered.image_tokens.expected);
    assert.equal(rendered.image_tokens.in_prompt, rendered.image_tokens.engine_reported);
    assert.equal(r.sample.prompt_ids.filter((t) => t === IMAGE_PAD).length, rendered.image_tokens.expected);
    assert.ok(
      largestPayloadBytes(await client.workflow.getHandle(r.workflowId).fetchHistory()) < 256 * 1024,
      'payloads stay small',
    );
  }
  await recordHistory(client, results[0]!.workflowId, 'episode-live-geo3k-multi-turn');
});

test('budget exhausted for real: a length finish is TRUNCATED with exactly the budget', {
  skip,
  timeout: 600_000,
}, async () => {
  const r = await runEpisode(rows[0]!, 'live-budget', 0, settings({ max_response_len: 6 }, { stop: [] }));
  // a random model almost never ends within 6 tokens; if it did, the episode completed honestly
  if (r.summary.status === 'TRUNCATED')
    assert.deepEqual([r.summary.truncated_reason, r.summary.response_len], ['budget_exhausted', 6]);
  await assertTokenExact(r);
});

test('stop string without EOS for real: synthetic EOS (mask 0), then no tool call → final answer, COMPLETED', {
  skip,
  timeout: 600_000,
}, async () => {
  // "e" occurs in most of the vocabulary, so the random model hits this stop string quickly
  const r = await runEpisode(rows[1]!, 'live-stop', 1, settings({ max_response_len: 64 }, { stop: ['e'] }));
  const gen = r.calls.find((c) => c.type === 'generateTurn')!.result as {
    finish_reason: string;
    generated_tokens: number;
    text: string;
  };
  assert.equal(gen.finish_reason, 'stop');
  assert.ok(gen.text.includes('e'));
  assert.deepEqual([r.summary.status, r.summary.turns], ['COMPLETED', 1]);
  assert.equal(r.sample.response_ids.length, gen.generated_tokens + 1);
  assert.equal(r.sample.loss_mask.at(-1), 0);
  assert.equal(r.sample.rollout_logprobs.at(-1), 0);
  assert.equal(r.sample.response_ids.at(-1), 151645);
  const env = r.calls.find((c) => c.type === 'envStep')!.result as { reason: string };
  assert.equal(env.reason, 'no_tool_call');
  await assertTokenExact(r);
  await recordHistory(client, r.workflowId, 'episode-live-stop-string');
});

test('a tool-using second turn on the real template: observation masked and decoded as the user turn', {
  skip,
  timeout: 600_000,
}, async () => {
  firstTurnScript = '<tool_call>\n{"name": "calc_score", "arguments": {"answer": "-12345"}}\n</tool_call>';
  const r = await runEpisode(rows[2]!, 'live/scripted', 2, settings({ max_response_len: 400 }));
  firstTurnScript = null;
  assert.equal(r.summary.turns, 2);
  // the text rendered as the observation: the environment's (renderObservation is a local activity, its input not in the history)
  const obs = r.calls.find((c) => c.type === 'envStep')!.result as { observation: string };
  assert.equal(r.calls.filter((c) => c.type === 'renderObservation').length, 1);
  assert.match(obs.observation, /last chance/);
  const spans = maskedSpans(r.sample.loss_mask);
  const observationText = await engines.detokenize(r.sample.response_ids.slice(spans[0]![0], spans[0]![1]));
  assert.equal(observationText, `<|im_end|>\n<|im_start|>user\n${obs.observation}<|im_end|>\n<|im_start|>assistant\n`);
  await assertTokenExact(r);
  const audit = await auditEpisode(client, store, r.id);
  assert.equal(audit.invariants?.ok, true);
  assert.equal(audit.turns[0]!.synthetic_eos, true);
  assert.ok(audit.turns[1]!.generated_tokens > 0);
  await recordHistory(client, r.workflowId, 'episode-live-scripted-tool-turn');
});
