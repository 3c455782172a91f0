// Prompt construction, the synthetic dataset, HF URL building and the SFT export.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import sharp from 'sharp';
import { DatasetConfig } from '../../config/schema.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import {
  CALC_SCORE_TOOL,
  DEFAULT_SYSTEM_PROMPT,
  GEO3K_REPO,
  downloadHfParquet,
  PLAIN_INSTRUCTION,
  buildMessages,
  hfInfoUrl,
  hfResolveUrl,
  loadDataset,
  parquetFilesOf,
  resolveImageUrls,
  sftAnswer,
  simplifiedSqrt,
  syntheticProblems,
  writeSftJsonl,
  writeSyntheticDataset,
} from '../../lib/data/index.js';
import { scoreResponse } from '../../lib/math/reward.js';
import { labelToLatex } from '../../lib/math/to-latex.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-prompt-'));
const store = new LocalBlobStore(path.join(tmp, 'blobs'));
const row = {
  id: 'r1',
  problem: '<image>Find AB.',
  answer: '5*sqrt(3)',
  images: ['blob:cas/aa/x.png', 'blob:cas/bb/y.png'],
};

test('buildMessages: system prompt, image parts then text, the calc_score tool', () => {
  const p = buildMessages(row);
  assert.deepEqual(p.messages[0], { role: 'system', content: DEFAULT_SYSTEM_PROMPT });
  const user = p.messages[1]!;
  assert.equal(user.role, 'user');
  assert.ok(Array.isArray(user.content));
  const parts = user.content as Exclude<typeof user.content, string>;
  assert.deepEqual(parts.slice(0, 2), [
    { type: 'image_url', image_url: { url: 'blob:cas/aa/x.png' } },
    { type: 'image_url', image_url: { url: 'blob:cas/bb/y.png' } },
  ]);
  assert.equal(parts[2]!.type, 'text');
  assert.match((parts[2] as { text: string }).text, /^Find AB\.\n\n.*calc_score.*\\boxed\{\}/s);
  assert.deepEqual(p.tools, [CALC_SCORE_TOOL]);
  assert.deepEqual(CALC_SCORE_TOOL.function.parameters.required, ['answer']);
  assert.equal(CALC_SCORE_TOOL.function.parameters.properties.answer.type, 'string');
});

test('buildMessages: configurable system prompt, instruction and tools', () => {
  const custom = buildMessages(row, { systemPrompt: 'Be brief.', tools: false });
  assert.deepEqual(custom.messages[0], { role: 'system', content: 'Be brief.' });
  assert.deepEqual(custom.tools, []);
  assert.equal(custom.instruction, PLAIN_INSTRUCTION);
  assert.equal(buildMessages(row, { systemPrompt: '' }).messages[0]!.role, 'user');
  assert.equal(buildMessages(row, { instruction: 'Go.' }).instruction, 'Go.');
});

test('resolveImageUrls turns blob refs into PNG data URLs', async () => {
  const ref = await store.putBytes(
    await sharp({ create: { width: 4, height: 4, channels: 3, background: '#000' } })
      .png()
      .toBuffer(),
    'png',
  );
  const resolved = await resolveImageUrls(buildMessages({ ...row, images: [ref] }).messages, store);
  const part = (resolved[1]!.content as Array<{ type: string; image_url?: { url: string } }>)[0]!;
  assert.match(part.image_url!.url, /^data:image\/png;base64,/);
});

test('synthetic problems: seeded, known answers that the RM accepts', () => {
  const a = syntheticProblems(40, 7);
  assert.deepEqual(a, syntheticProblems(40, 7));
  assert.notDeepEqual(a, syntheticProblems(40, 8));
  for (const p of a) {
    assert.equal(scoreResponse(`\\boxed{${labelToLatex(p.answer)}}`, p.answer).reward, 1, p.answer);
    assert.match(p.svg, /^<svg /);
  }
  assert.equal(simplifiedSqrt(75), '5*sqrt(3)');
  assert.equal(simplifiedSqrt(169), '13');
  assert.equal(simplifiedSqrt(181), 'sqrt(181)');
});

test('synthetic dataset: written in the geo3k layout, loads, same seed → same blobs', async () => {
  const out = path.join(tmp, 'synth');
  assert.deepEqual(await writeSyntheticDataset(out, 12, 3), { train: 12, test: 4 });
  assert.equal(readdirSync(path.join(out, 'images')).length, 16);
  const loaded = await loadDataset(DatasetConfig.parse({ kind: 'geo3k_dir', path: out }), 'train', store);
  assert.equal(loaded.rows.length, 12);
  const inMemory = await loadDataset(
    DatasetConfig.parse({ kind: 'synthetic', synthetic_size: 12, synthetic_seed: 3 }),
    'train',
    store,
  );
  assert.deepEqual(inMemory.rows, loaded.rows);
  const meta = await sharp(store.pathOf(loaded.rows[0]!.images[0]!)).metadata();
  assert.deepEqual([meta.format, meta.width, meta.height], ['png', 320, 240]);
  const evalRows = await loadDataset(
    DatasetConfig.parse({ kind: 'synthetic', synthetic_size: 12, synthetic_seed: 3 }),
    'eval',
    store,
  );
  assert.equal(evalRows.rows.length, 4);
});

test('HF URL building for hiyouga/geometry3k', () => {
  assert.equal(GEO3K_REPO, 'hiyouga/geometry3k');
  assert.equal(
    hfResolveUrl(GEO3K_REPO, 'data/train-00000-of-00001.parquet'),
    'https://huggingface.co/datasets/hiyouga/geometry3k/resolve/main/data/train-00000-of-00001.parquet',
  );
  assert.equal(
    hfResolveUrl(GEO3K_REPO, 'a b.parquet', { revision: 'refs/pr/1', endpoint: 'https://hf-mirror.com/' }),
    'https://hf-mirror.com/datasets/hiyouga/geometry3k/resolve/refs%2Fpr%2F1/a%20b.parquet',
  );
  assert.equal(hfInfoUrl(GEO3K_REPO), 'https://huggingface.co/api/datasets/hiyouga/geometry3k/revision/main');
  assert.throws(() => hfResolveUrl('../evil', 'x'));
  assert.throws(() => hfResolveUrl(GEO3K_REPO, '../../x.parquet'));
  const info = {
    siblings: [
      { rfilename: 'README.md' },
      { rfilename: 'data/test-00000-of-00001.parquet' },
      { rfilename: 'data/train-00000-of-00001.parquet' },
    ],
  };
  assert.deepEqual(parquetFilesOf(info), ['data/test-00000-of-00001.parquet', 'data/train-00000-of-00001.parquet']);
  assert.throws(() => parquetFilesOf({ nope: 1 }));
});

test('downloadHfParquet against a local stand-in for the Hub', async () => {
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(`${req.url} ${req.headers.authorization ?? ''}`);
    if (req.url === '/api/datasets/hiyouga/geometry3k/revision/main') {
      res.end(
        JSON.stringify({ siblings: [{ rfilename: 'README.md' }, { rfilename: 'data/test-00000-of-00001.parquet' }] }),
      );
    } else if (req.url === '/datasets/hiyouga/geometry3k/resolve/main/data/test-00000-of-00001.parquet')
      res.end('PAR1...PAR1');
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const files = await downloadHfParquet(GEO3K_REPO, path.join(tmp, 'hf'), { endpoint, token: 'tok' });
    assert.deepEqual(files, [path.join(tmp, 'hf', 'data', 'test-00000-of-00001.parquet')]);
    assert.equal(readFileSync(files[0]!, 'utf8'), 'PAR1...PAR1');
    assert.ok(seen.every((s) => s.endsWith('Bearer tok')));
  } finally {
    server.close();
  }
});

test('SFT export: Answer: \\boxed{…} in LaTeX, one JSONL line per row', async () => {
  assert.equal(sftAnswer('5*sqrt(3)'), 'Answer: \\boxed{5\\sqrt{3}}');
  assert.equal(sftAnswer('13*pi/9'), 'Answer: \\boxed{\\frac{13\\pi}{9}}');
  const ref = await store.putBytes(Buffer.from('x'), 'png');
  const file = path.join(tmp, 'sft', 'out.jsonl');
  assert.equal(await writeSftJsonl([{ ...row, images: [ref] }], store, file, 'Sys.'), 1);
  const rec = JSON.parse(readFileSync(file, 'utf8').trim());
  assert.deepEqual(
    rec.messages.map((m: { role: string }) => m.role),
    ['system', 'user', 'assistant'],
  );
  assert.equal(rec.messages[0].content, 'Sys.');
  assert.match(rec.messages[1].content, /^<image>Find AB\./);
  assert.equal(rec.messages[2].content, 'Answer: \\boxed{5\\sqrt{3}}');
  assert.deepEqual(rec.images, [store.pathOf(ref)]);
  assert.equal(scoreResponse(rec.messages[2].content, row.answer).reward, 1);
});
