// Bad input, table-driven, in process: configs, outputs, server and ids, dataset rows, images, engine
// responses, tool calls and reward inputs. Each row says what must happen (the returned error or
// outcome), that the message names the thing and its value, and that nothing on disk was lost.
// (Command-line rows: bad-input-cli.test.ts.)
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, test } from 'node:test';
import sharp from 'sharp';
import { ConfigError, loadConfig, parseBoolVar, setOverrides } from '../../config/load.js';
import { normalizeEpisodeId } from '../../client/audit.js';
import { parseEpisodeId } from '../../protocol/episode.js';
import { LocalBlobStore, parseBlobStoreUri } from '../../stores/blobstore.js';
import { toolTranscripts } from '../../lib/data/transcripts.js';
import { pythonBin, REPO_ROOT } from '../../base/paths.js';
import { endpointOf } from '../../lib/data/hf.js';
import { rowsFromRecords } from '../../lib/data/load.js';
import { readJsonl } from '../../lib/data/readers.js';
import { DatasetError } from '../../lib/data/rows.js';
import { writeSyntheticDataset } from '../../lib/data/synth.js';
import { geo3kStep } from '../../lib/env/geo3k.js';
import { ImageError, ImageIntake, normalizeToPng } from '../../lib/images.js';
import { gradeAnswer } from '../../lib/math/reward.js';
import { listensOn, startServer, stopServer } from '../../supervise/server.js';
import { checkGenerated } from '../../lib/trajectory.js';
import { file, fresh, freePort, next, occupy, snapshot, tmp } from '../../testing/bad-input.js';

// ── pure functions ─────────────────────────────────────────────────────────────────────────────

describe('config, outputs, server and ids (in-process)', () => {
  test('--set __proto__ never reaches Object.prototype', () => {
    assert.throws(
      () => setOverrides(['__proto__.polluted=1']),
      (e: unknown) => e instanceof ConfigError && /__proto__/.test(e.message),
    );
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  test('boolean variables: true/false/1/0/yes/no/on/off in any case, nothing else', () => {
    for (const v of ['true', 'TRUE', '1', 'yes', 'Yes', 'on', 'ON'])
      assert.equal(parseBoolVar('TEMPORAL_TLS', v), true, v);
    for (const v of ['false', 'False', '0', 'no', 'NO', 'off', 'Off'])
      assert.equal(parseBoolVar('TEMPORAL_TLS', v), false, v);
    for (const v of ['y', 'enabled', '2', ''])
      assert.throws(
        () => parseBoolVar('TEMPORAL_TLS', v),
        (e: unknown) => e instanceof ConfigError && e.message.includes(`TEMPORAL_TLS=${JSON.stringify(v)}`),
      );
  });

  test('HF_ENDPOINT that is not an http(s) URL names the variable and the value', () => {
    for (const v of ['not a url', 'ftp://mirror.example/hf'])
      assert.throws(
        () => endpointOf({}, { HF_ENDPOINT: v }),
        (e: Error) => e.message.includes(`HF_ENDPOINT=${JSON.stringify(v)}`),
      );
    assert.equal(endpointOf({}, { HF_ENDPOINT: 'https://hf-mirror.com/' }), 'https://hf-mirror.com');
  });

  test('episode ids: the workflow id form is accepted, a run named "episode" is kept', () => {
    assert.equal(normalizeEpisodeId('episode/RUN/0/0/0'), 'RUN/0/0/0');
    assert.equal(normalizeEpisodeId('RUN/0/0/0'), 'RUN/0/0/0');
    assert.equal(normalizeEpisodeId('episode/0/1/2'), 'episode/0/1/2');
  });

  test('episode ids: numbers are digits only (Number() read "", 0x1 and 1e3)', () => {
    for (const id of ['RUN//0/0', 'RUN/0x1/0/0', 'RUN/1e3/0/0', 'RUN/0/ 1/0', 'RUN/0/0/01', '/0/0/0', 'RUN/-1/0/0'])
      assert.throws(
        () => parseEpisodeId(id),
        new RegExp(`not an episode id .*${JSON.stringify(id).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`),
        id,
      );
    assert.deepEqual(parseEpisodeId('a/b/10/0/3'), { run_id: 'a/b', step: 10, prompt_index: 0, sample_index: 3 });
  });

  test('listensOn tells our listening socket from another process', async () => {
    const o = await occupy();
    try {
      assert.equal(listensOn(process.pid, o.port), true);
      assert.equal(listensOn(process.pid, o.port === 65535 ? 1 : o.port + 1), false);
    } finally {
      await o.close();
    }
  });

  test('server start: a port answered by another process is not our server starting', async () => {
    // A stand-in for the temporal binary: another server grabs the port, ours dies at bind.
    const port = await freePort();
    const fake = file(
      'fake-temporal',
      `#!/usr/bin/env bash
node -e "require('net').createServer(c => c.destroy()).listen(${port}, '127.0.0.1'); setTimeout(() => process.exit(0), 6000)" &
sleep 2
exit 1
`,
    );
    chmodSync(fake, 0o755);
    const cfg = loadConfig({
      env: {},
      sets: [`state_dir=${fresh('state')}`, `server.port=${port}`, `server.ui_port=${await freePort()}`],
    });
    const saved = process.env.TEMPO_RL_TEMPORAL_BIN;
    process.env.TEMPO_RL_TEMPORAL_BIN = fake;
    try {
      await assert.rejects(startServer(cfg), /exited at start/);
    } finally {
      process.env.TEMPO_RL_TEMPORAL_BIN = saved;
    }
    assert.equal(await stopServer(cfg), false);
  });

  test('data synth --force replaces its own dataset whole: no old images mixed with new', async () => {
    const out = path.join(fresh('synth'), 'ds');
    await writeSyntheticDataset(out, 6, 1);
    const before = snapshot(out);
    await assert.rejects(writeSyntheticDataset(out, 2, 2), /--force/);
    assert.deepEqual(snapshot(out), before);
    await writeSyntheticDataset(out, 2, 2, { force: true });
    const images = readdirSync(path.join(out, 'images')).sort();
    assert.deepEqual(images, [
      'synth-1000005-0.png',
      'synth-1000005-1.png',
      'synth-1000005-2.png',
      'synth-1000005-3.png',
      'synth-2-0.png',
      'synth-2-1.png',
    ]);
    // a file tempo-rl did not write makes even --force refuse
    writeFileSync(path.join(out, 'notes.md'), 'mine');
    const withNotes = snapshot(out);
    await assert.rejects(writeSyntheticDataset(out, 2, 3, { force: true }), /notes\.md, which tempo-rl did not write/);
    assert.deepEqual(snapshot(out), withNotes);
  });
});

// ── bounds of the config's keys, and the trainer's side of the same rules

/** Loads defaults plus --set flags; the ConfigError's message, or null when it loads. */
function refusal(...sets: string[]): string | null {
  try {
    loadConfig({ env: {}, sets: [`state_dir=${fresh('state')}`, ...sets] });
    return null;
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.message;
  }
}

test('run.deterministic: engine arguments that batch or cache across requests are refused, naming the argument', () => {
  for (const arg of ['--max-num-seqs', '--enable-prefix-caching', '--enable-chunked-prefill=true']) {
    const msg = refusal(
      'run.deterministic=true',
      `engines.extra_args=${JSON.stringify([arg, ...(arg === '--max-num-seqs' ? ['8'] : [])])}`,
    );
    assert.ok(msg?.includes('engines.extra_args') && msg.includes(arg), `${arg}: ${msg}`);
  }
  assert.equal(refusal('run.deterministic=false', 'engines.extra_args=["--max-num-seqs","8"]'), null);
  assert.equal(refusal('run.deterministic=true', 'engines.extra_args=["--kv-cache-memory-bytes","2147483648"]'), null);
  assert.equal(refusal('run.deterministic=true', 'engines.extra_args=["--no-enable-prefix-caching"]'), null);
});

/** The leaves of a loaded config tree, as dotted keys. */
function leafKeys(node: unknown, trail: string[] = []): string[] {
  if (typeof node !== 'object' || node === null || Array.isArray(node)) return [trail.join('.')];
  return Object.entries(node).flatMap(([k, v]) => leafKeys(v, [...trail, k]));
}

/** Verdicts of the Python trainer's code on JSON inputs: "ok" or the error's first line. */
function python(script: string, input: unknown): Record<string, string> {
  const res = spawnSync(pythonBin(), ['-c', script], {
    input: JSON.stringify(input),
    encoding: 'utf8',
    cwd: REPO_ROOT,
    env: { ...process.env, PYTHONPATH: path.join(REPO_ROOT, 'workers') },
  });
  assert.equal(res.status, 0, res.stderr);
  return JSON.parse(res.stdout) as Record<string, string>;
}

describe('bounds of config keys (in-process)', () => {
  test("every duration key (*_s, *_ms) refuses what Node's timers cannot wait, naming the key and the value", () => {
    const durations = leafKeys(loadConfig({ env: {} })).filter((k) => /_(s|ms)$/.test(k));
    assert.ok(durations.length >= 4, durations.join(', '));
    // A key read only beside another is checked where it is read.
    const beside = (key: string) =>
      key.startsWith('python_env.openenv.')
        ? ['rollout.environment=openenv', 'python_env.openenv.url=http://127.0.0.1:8000']
        : [];
    for (const key of durations) {
      const why = refusal(...beside(key), `${key}=2147484`);
      assert.ok(why, `${key} 2147484 accepted`);
      assert.match(
        why,
        new RegExp(`${key.replaceAll('.', '\\.')}: at most 2147483 s .*Node's timers.*given number 2147484`),
      );
      assert.equal(refusal(...beside(key), `${key}=2147483`), null, key);
    }
  });

  test('every size key that could exhaust memory has an upper bound, named with the key and the value', () => {
    const sizes = [
      'engines.count',
      'engines.max_model_len',
      'model.num_gpus',
      'dataset.synthetic_size',
      'dataset.max_image_pixels',
      'dataset.max_image_bytes',
      'rollout.prompts_per_step',
      'rollout.n_samples_per_prompt',
      'rollout.max_context_len',
      'rollout.max_response_len',
      'rollout.concurrency',
      'grpo.micro_batch_tokens',
      'grpo.ppo_mini_batches',
      'sft.batch_size',
      'run.eval_prompts',
      'engines.ipc_bucket_mb',
    ];
    for (const key of sizes) {
      const why = refusal(`${key}=1099511627776`);
      assert.ok(why, `${key} 2^40 accepted`);
      assert.match(
        why,
        new RegExp(`${key.replaceAll('.', '\\.')}: .*(at most|less than or equal).*given number 1099511627776`),
        key,
      );
    }
  });

  test("grpo.tis.clip: the trainer's contract (TisConfig) refuses and accepts what the config does", () => {
    const cases: Record<string, { clip: number; mode: 'truncate' | 'mask' }> = {
      truncate_half: { clip: 0.5, mode: 'truncate' },
      mask_half: { clip: 0.5, mode: 'mask' },
      mask_one: { clip: 1, mode: 'mask' },
      truncate_one: { clip: 1, mode: 'truncate' },
      mask_two: { clip: 2, mode: 'mask' },
    };
    const py = python(
      `
import json, sys
from trainer.contract import TisConfig
out = {}
for name, t in json.load(sys.stdin).items():
    try:
        TisConfig(enabled=True, **t); out[name] = "ok"
    except Exception as err:
        out[name] = str(err).splitlines()[0]
print(json.dumps(out))`,
      cases,
    );
    for (const [name, t] of Object.entries(cases)) {
      const ts = refusal('grpo.tis.enabled=true', `grpo.tis.clip=${t.clip}`, `grpo.tis.mode=${t.mode}`);
      assert.equal(ts === null, py[name] === 'ok', `${name}: config says ${ts ?? 'ok'}, trainer says ${py[name]}`);
    }
    assert.deepEqual(
      Object.keys(py)
        .filter((n) => py[n] === 'ok')
        .sort(),
      ['mask_two', 'truncate_one'],
    );
  });

  test('blob store URIs: the trainer (tempo_common/blob_uri.py) and stores/blobstore.ts refuse the same values for the same reasons', () => {
    const bad: Record<string, [string, RegExp]> = {
      proc: ['/proc/x', /virtual filesystem/],
      sys_url: ['file:///sys/x', /virtual filesystem/],
      blank: ['   ', /blank/],
      padded: [' /tmp/b', /whitespace/],
      nul_decoded: ['file:///tmp/a%00b', /NUL/],
      newline_decoded: ['file:///tmp/a%0Ab', /control character/],
      other_home: ['~other/b', /another user's home/],
    };
    const good = { home: '~/blobs', plain: '/tmp/blobs', url: 'file:///tmp/blobs', s3: 's3://bucket-1/p' };
    const py = python(
      `
import json, sys
from tempo_common.blob_uri import parse_blob_store_uri, canonical_blob_store_uri
out = {}
for name, uri in json.load(sys.stdin).items():
    try:
        parse_blob_store_uri(uri); out[name] = canonical_blob_store_uri(uri)
    except Exception as err:
        out[name] = "refused: " + str(err)
print(json.dumps(out))`,
      { ...Object.fromEntries(Object.entries(bad).map(([k, [u]]) => [k, u])), ...good },
    );
    for (const [name, [uri, why]] of Object.entries(bad)) {
      assert.throws(
        () => parseBlobStoreUri(uri),
        (e: Error) => why.test(e.message) && e.message.includes(JSON.stringify(uri)),
        name,
      );
      assert.match(py[name]!, /^refused: /, name);
      assert.match(py[name]!, why, name);
      assert.ok(py[name]!.includes(JSON.stringify(uri)), `${name}: ${py[name]}`);
    }
    assert.deepEqual(parseBlobStoreUri('~/blobs'), { kind: 'local', root: path.join(os.homedir(), 'blobs') });
    for (const [name, uri] of Object.entries(good)) {
      const loc = parseBlobStoreUri(uri);
      assert.equal(py[name], loc.kind === 'local' ? pathToFileURL(loc.root).href : uri, name);
    }
  });

  test('transcripts: an empty habit answer or too many copies is refused before anything is built', () => {
    assert.throws(
      () => toolTranscripts([], store, { max_turns: 2, seed: 1, habit: ['5', ''] }),
      /answer 2 of 2 is empty/,
    );
    assert.throws(
      () => toolTranscripts([], store, { max_turns: 2, seed: 1, per_row: 10_001 }),
      /per_row 10001 is more than 10000/,
    );
  });
});

const store = new LocalBlobStore(path.join(tmp, 'blobs'));
const imgRoot = fresh('img');
const pngBytes = await sharp({ create: { width: 32, height: 32, channels: 3, background: '#36c' } })
  .png()
  .toBuffer();
writeFileSync(path.join(imgRoot, 'a.png'), pngBytes);
const intake = () => new ImageIntake({ store, roots: [imgRoot], baseDir: imgRoot });
const row = (over: Record<string, unknown> = {}) =>
  JSON.stringify({ id: `r${next()}`, problem: 'Find x.', answer: '3', images: ['a.png'], ...over });

async function loadJsonl(bytes: Buffer | string) {
  const f = path.join(imgRoot, `rows-${next()}.jsonl`);
  writeFileSync(f, bytes);
  return rowsFromRecords(await readJsonl(f), intake(), 'rows');
}

interface RowCase {
  kind: string;
  lines: Buffer | string;
  /** How many rows load, and the skipped row numbers with a pattern their reason must match. */
  loaded: number;
  skipped: Array<[number, RegExp]>;
}

const ROW_CASES: RowCase[] = [
  {
    kind: 'non-UTF-8 bytes in a JSONL row',
    lines: Buffer.concat([
      Buffer.from(`${row()}\n{"id": "x", "problem": "caf`),
      Buffer.from([0xff]),
      Buffer.from(`", "answer": "1", "images": ["a.png"]}\n${row()}\n`),
    ]),
    loaded: 2,
    skipped: [[2, /not valid UTF-8: byte 0xff/]],
  },
  {
    kind: 'a UTF-8 BOM before row 1',
    lines: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(`${row()}\n${row()}\n`)]),
    loaded: 2,
    skipped: [],
  },
  {
    kind: 'more <image> placeholders than images',
    lines: `${row({ problem: '<image> and <image>: find x.' })}\n${row({ problem: '<image> find x.' })}\n`,
    loaded: 1,
    skipped: [[1, /2 <image> placeholders but the row has 1 image/]],
  },
  {
    kind: 'fewer <image> placeholders than images',
    lines: `${row({ problem: '<image> find x.', images: ['a.png', 'a.png'] })}\n`,
    loaded: 0,
    skipped: [[1, /1 <image> placeholders but the row has 2 image/]],
  },
  {
    kind: 'duplicate row ids',
    lines: `${row({ id: 'same' })}\n${row({ id: 'same' })}\n${row()}\n`,
    loaded: 2,
    skipped: [[2, /duplicate id "same" \(first at row 1 of rows\)/]],
  },
  {
    kind: 'an empty problem',
    lines: `${row({ problem: '  ' })}\n`,
    loaded: 0,
    skipped: [[1, /problem: empty problem/]],
  },
  { kind: 'a missing answer', lines: `${row({ answer: undefined })}\n`, loaded: 0, skipped: [[1, /answer: missing/]] },
  { kind: 'a row that is a JSON array', lines: `[1, 2]\n${row()}\n`, loaded: 1, skipped: [[1, /not a JSON object/]] },
  { kind: 'a line that is not JSON', lines: `${row()}\n{"id": \n`, loaded: 1, skipped: [[2, /invalid JSON/]] },
  { kind: 'a row without an image', lines: `${row({ images: [] })}\n`, loaded: 0, skipped: [[1, /no image/]] },
  {
    kind: 'an image path outside the roots',
    lines: `${row({ images: ['../../etc/passwd'] })}\n`,
    loaded: 0,
    skipped: [[1, /image \.\.\/\.\.\/etc\/passwd: "\.\." is not allowed/]],
  },
  {
    kind: 'an image that is not an image',
    lines: `${row({ images: [`data:image/png;base64,${Buffer.from('hello').toString('base64')}`] })}\n`,
    loaded: 0,
    skipped: [[1, /not an image/]],
  },
];

describe('bad dataset rows', () => {
  for (const c of ROW_CASES) {
    test(c.kind, async () => {
      const got = await loadJsonl(c.lines);
      assert.equal(got.rows.length, c.loaded, JSON.stringify(got.skipped));
      assert.deepEqual(
        got.skipped.map((s) => s.row),
        c.skipped.map(([r]) => r),
      );
      c.skipped.forEach(([, re], i) => assert.match(got.skipped[i]!.reason, re));
    });
  }
  test('an empty JSONL file is a DatasetError naming it', async () => {
    await assert.rejects(
      loadJsonl('\n\n'),
      (e: unknown) => e instanceof DatasetError && /rows-\d+\.jsonl is empty/.test(e.message),
    );
  });
});

function withBadCrc(chunk: string): Buffer {
  const b = Buffer.from(pngBytes);
  const at = b.indexOf(Buffer.from(chunk));
  const crcAt = at + 4 + b.readUInt32BE(at - 4);
  b.writeUInt32BE((b.readUInt32BE(crcAt) ^ 0xff) >>> 0, crcAt);
  return b;
}

describe('bad images', () => {
  const limits = { maxPixels: 1e6, maxBytes: 1e6 };
  for (const chunk of ['IHDR', 'IDAT', 'IEND']) {
    test(`a bad CRC in the ${chunk} chunk is reported as damage, not a write error`, async () => {
      await assert.rejects(normalizeToPng(withBadCrc(chunk), limits, 'diagram.png'), (e: unknown) => {
        assert.ok(e instanceof ImageError);
        assert.equal(e.code, 'corrupt');
        assert.match(e.message, new RegExp(`diagram\\.png: bad CRC .*"${chunk}"`));
        assert.doesNotMatch(e.message, /write/);
        return true;
      });
    });
  }
  test('a valid PNG still passes the CRC check', async () => {
    assert.ok((await normalizeToPng(pngBytes, limits)).length > 0);
  });
});

// ── functions other parts of tempo-rl are changing: only robust facts (no throw, nothing rewarded, a reason)

const ENGINE_RESPONSES: Array<[string, { token_ids: number[]; logprobs: number[]; finish_reason: string }]> = [
  ['an unknown finish reason', { token_ids: [1], logprobs: [-0.1], finish_reason: 'banana' }],
  ['no tokens', { token_ids: [], logprobs: [], finish_reason: 'stop' }],
  ['more tokens than logprobs', { token_ids: [1, 2], logprobs: [-0.1], finish_reason: 'stop' }],
  ['a NaN logprob', { token_ids: [1], logprobs: [Number.NaN], finish_reason: 'stop' }],
  ['a positive logprob', { token_ids: [1], logprobs: [0.5], finish_reason: 'stop' }],
  ["vLLM's -9999 placeholder logprob", { token_ids: [1], logprobs: [-9999], finish_reason: 'length' }],
  ['a negative token id', { token_ids: [-3], logprobs: [-0.1], finish_reason: 'stop' }],
  ['a fractional token id', { token_ids: [1.5], logprobs: [-0.1], finish_reason: 'stop' }],
  [
    'more tokens than the budget',
    { token_ids: [1, 2, 3, 4, 5], logprobs: [-1, -1, -1, -1, -1], finish_reason: 'length' },
  ],
];

describe('bad engine responses (checkGenerated)', () => {
  for (const [kind, out] of ENGINE_RESPONSES) {
    test(kind, () => {
      const stop = checkGenerated(out, 4);
      assert.ok(stop, 'accepted');
      assert.notEqual(stop.status, 'COMPLETED');
      assert.equal(typeof stop.reason, 'string');
      assert.ok(String(stop.reason).length > 0);
    });
  }
});

const TOOL_TURNS: Array<[string, string]> = [
  ['malformed JSON in the tool call', '<tool_call>{"name": "calc_score", "arguments": {"answer": </tool_call>'],
  ['an unknown tool', '<tool_call>{"name": "rm_rf", "arguments": {"answer": "3"}}</tool_call>'],
  ['no answer argument', '<tool_call>{"name": "calc_score", "arguments": {}}</tool_call>'],
  ['an answer that is an object', '<tool_call>{"name": "calc_score", "arguments": {"answer": {"x": 1}}}</tool_call>'],
  ['an unclosed tool call', '<tool_call>{"name": "calc_score", "arguments": {"answer": "3"}}'],
  [
    'a 200k-character turn',
    `${'x'.repeat(200_000)}<tool_call>{"name": "calc_score", "arguments": {"answer": "4"}}</tool_call>`,
  ],
  [
    'arguments as a JSON string',
    '<tool_call>{"name": "calc_score", "arguments": "{\\"answer\\": \\"4\\"}"}</tool_call>',
  ],
];

describe('bad tool calls (geo3kStep)', () => {
  for (const [kind, text] of TOOL_TURNS) {
    test(kind, () => {
      const r = geo3kStep({ text, label: '3*sqrt(7)', turn: 1, max_turns: 3 });
      assert.notEqual(r.score, 1);
      assert.equal(typeof r.reason, 'string');
      assert.ok(r.reason.length > 0);
      assert.ok(r.done || typeof r.observation === 'string');
    });
  }
});

const ANSWERS: Array<[string, string]> = [
  ['an empty answer', ''],
  ['unbalanced LaTeX', '\\frac{3'],
  ['a 5000-character answer', '1'.repeat(5000)],
  ['NaN', 'NaN'],
  ['Infinity', 'Infinity'],
  ['division by zero', '1/0'],
  ['code instead of math', 'process.exit(1)'],
  ['a mathjs function call', 'import({}, {override: true})'],
  ['control characters', '\u0000\u0007\u001b[2J'],
];

describe('bad reward inputs (gradeAnswer)', () => {
  for (const [kind, answer] of ANSWERS) {
    test(kind, () => {
      const g = gradeAnswer(answer, '3*sqrt(7)');
      assert.equal(g.reward, 0);
      assert.equal(typeof g.reason, 'string');
      assert.ok(g.reason.length > 0);
    });
  }
});
