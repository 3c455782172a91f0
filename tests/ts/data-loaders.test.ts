// Dataset loaders: JSONL, Parquet (HF geo3k layout), the geo3k folder; bad rows skipped with their number.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { parquetWriteBuffer } from 'hyparquet-writer';
import sharp from 'sharp';
import { DatasetConfig } from '../../config/schema.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { DatasetError, loadDataset } from '../../lib/data/index.js';
import { REPO_ROOT } from '../../base/paths.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-data-'));
const store = new LocalBlobStore(path.join(tmp, 'blobs'));
const cfg = (over: Record<string, unknown>) => DatasetConfig.parse(over);
const png = (color: string) =>
  sharp({ create: { width: 40, height: 30, channels: 3, background: color } })
    .png()
    .toBuffer();

function dir(name: string): string {
  const d = path.join(tmp, name);
  mkdirSync(path.join(d, 'images'), { recursive: true });
  return d;
}

test('JSONL: bad rows are skipped with their line number; the rest loads', async () => {
  const d = dir('jsonl');
  writeFileSync(path.join(d, 'images', 'a.png'), await png('#ff0000'));
  writeFileSync(path.join(d, 'images', 'bad.png'), 'not a png');
  const lines = [
    { id: 'ok-1', problem: 'Find x.', answer: '5', images: ['images/a.png'] },
    { id: 'no-answer', problem: 'Find x.', images: ['images/a.png'] },
    { id: 'no-image', problem: 'Find x.', answer: '5' },
    { id: 'empty-images', problem: 'Find x.', answer: '5', images: [] },
    '{not json',
    { id: 'escape', problem: 'Find x.', answer: '5', images: ['../../etc/passwd'] },
    { id: 'corrupt', problem: 'Find x.', answer: '5', images: ['images/bad.png'] },
    { id: 'ok-2', problem: 'Find y.', answer: 7, images: ['images/a.png'] },
    { problem: 'No id.', answer: '2*sqrt(3)', image: 'images/a.png' },
  ];
  const file = path.join(d, 'train.jsonl');
  writeFileSync(file, `${lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')}\n\n`);
  const { rows, skipped } = await loadDataset(cfg({ kind: 'jsonl', path: file }), 'train', store);
  assert.deepEqual(
    rows.map((r) => r.id),
    ['ok-1', 'ok-2', 'train-9'],
  );
  assert.equal(rows[1]!.answer, '7');
  assert.equal(new Set(rows.flatMap((r) => r.images)).size, 1, 'one diagram, stored once');
  assert.deepEqual(
    skipped.map((s) => s.row),
    [2, 3, 4, 5, 6, 7],
  );
  const reason = (row: number) => skipped.find((s) => s.row === row)!.reason;
  assert.match(reason(2), /answer: missing/);
  assert.match(reason(3), /image/);
  assert.match(reason(5), /invalid JSON/);
  assert.match(reason(6), /row 6: image \.\.\/\.\.\/etc\/passwd/);
  assert.match(reason(7), /row 7: image images\/bad\.png/);
});

test('an empty file, a missing file, and a file with no usable row are DatasetErrors', async () => {
  const d = dir('empty');
  writeFileSync(path.join(d, 'train.jsonl'), '');
  await assert.rejects(
    loadDataset(cfg({ kind: 'jsonl', path: path.join(d, 'train.jsonl') }), 'train', store),
    (e) => e instanceof DatasetError && /empty/.test(e.message),
  );
  writeFileSync(path.join(d, 'empty.parquet'), '');
  await assert.rejects(
    loadDataset(cfg({ kind: 'parquet', path: path.join(d, 'empty.parquet') }), 'train', store),
    /empty/,
  );
  await assert.rejects(
    loadDataset(cfg({ kind: 'jsonl', path: path.join(d, 'nope.jsonl') }), 'train', store),
    /not found/,
  );
  await assert.rejects(loadDataset(cfg({ kind: 'jsonl', path: '' }), 'train', store), /dataset\.path/);
  writeFileSync(path.join(d, 'bad.jsonl'), '{"problem": "p"}\n');
  await assert.rejects(
    loadDataset(cfg({ kind: 'jsonl', path: path.join(d, 'bad.jsonl') }), 'train', store),
    /no usable rows.*row 1/,
  );
  writeFileSync(path.join(d, 'junk.parquet'), 'PAR1 this is not parquet');
  await assert.rejects(
    loadDataset(cfg({ kind: 'parquet', path: path.join(d, 'junk.parquet') }), 'train', store),
    /not a readable Parquet/,
  );
});

const HF_SCHEMA = [
  { name: 'root', num_children: 3 },
  { name: 'images', repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
  { name: 'element', repetition_type: 'OPTIONAL', num_children: 2 },
  { name: 'bytes', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL' },
  { name: 'path', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
  { name: 'problem', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
  { name: 'answer', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
] as const;

test('Parquet in the HF geo3k layout (images as {bytes, path}, bytes / path / URL)', async () => {
  const d = dir('parquet');
  mkdirSync(path.join(d, 'data'));
  const red = new Uint8Array(await png('#ff0000'));
  writeFileSync(path.join(d, 'data', 'diagram.png'), await png('#00ff00'));
  const columnData = [
    {
      name: 'images',
      data: [
        [{ bytes: red, path: 'ignored.png' }],
        [{ bytes: null, path: 'diagram.png' }],
        [{ bytes: red, path: null }],
        [{ bytes: null, path: 'https://example.com/x.png' }],
        [],
      ],
    },
    { name: 'problem', data: ['<image>Find AB.', '<image>Find x.', 'Find y.', 'Find z.', 'Find w.'] },
    { name: 'answer', data: ['5\\sqrt{3}', '12', null, '3', '4'] },
  ];
  writeFileSync(
    path.join(d, 'data', 'train-00000-of-00001.parquet'),
    Buffer.from(parquetWriteBuffer({ columnData, schema: [...HF_SCHEMA] as never })),
  );
  const { rows, skipped } = await loadDataset(cfg({ kind: 'parquet', path: d }), 'train', store);
  assert.equal(rows.length, 2, JSON.stringify(skipped));
  assert.deepEqual(
    rows.map((r) => r.answer),
    ['5\\sqrt{3}', '12'],
  );
  assert.equal(rows[0]!.problem, '<image>Find AB.');
  assert.deepEqual(
    skipped.map((s) => s.row),
    [3, 4, 5],
  );
  assert.match(skipped[1]!.reason, /allow_hosts/);
  assert.match(skipped[2]!.reason, /no image/);
});

test('Parquet with the wrong columns is refused with the columns it has', async () => {
  const d = dir('wrong');
  const file = path.join(d, 'wrong.parquet');
  const columnData = [
    { name: 'question', data: ['q'], type: 'STRING' as const },
    { name: 'solution', data: ['1'], type: 'STRING' as const },
  ];
  writeFileSync(file, Buffer.from(parquetWriteBuffer({ columnData })));
  await assert.rejects(
    loadDataset(cfg({ kind: 'parquet', path: file }), 'train', store),
    (e) =>
      e instanceof DatasetError &&
      /columns \[question, solution\]/.test(e.message) &&
      /missing: problem, answer, images/.test(e.message),
  );
});

test('the {split} placeholder and split file names', async () => {
  const d = dir('splits');
  writeFileSync(path.join(d, 'images', 'a.png'), await png('#0000ff'));
  const line = (id: string) => `${JSON.stringify({ id, problem: 'p', answer: '1', images: ['images/a.png'] })}\n`;
  writeFileSync(path.join(d, 'train_sample.jsonl'), line('t'));
  writeFileSync(path.join(d, 'test.jsonl'), line('e'));
  const geo = cfg({ kind: 'geo3k_dir', path: d });
  assert.equal((await loadDataset(geo, 'train', store)).rows[0]!.id, 't');
  assert.equal((await loadDataset(geo, 'eval', store)).rows[0]!.id, 'e');
  const placeholder = cfg({ kind: 'jsonl', path: path.join(d, '{split}.jsonl'), train_split: 'test' });
  assert.equal((await loadDataset(placeholder, 'train', store)).rows[0]!.id, 'e');
  await assert.rejects(
    loadDataset(cfg({ kind: 'geo3k_dir', path: d, eval_split: 'validation' }), 'eval', store),
    /split "validation"/,
  );
});

const GEO3K_DIR = process.env.TEMPO_RL_GEO3K_DIR ?? path.resolve(REPO_ROOT, '..', 'shared', 'data', 'geo3k');
test('the real geo3k folder loads completely', {
  skip:
    !existsSync(path.join(GEO3K_DIR, 'test.jsonl')) && `geo3k data not found at ${GEO3K_DIR} (set TEMPO_RL_GEO3K_DIR)`,
}, async () => {
  const { rows, skipped } = await loadDataset(cfg({ kind: 'geo3k_dir', path: GEO3K_DIR }), 'eval', store);
  assert.equal(rows.length, 554);
  assert.deepEqual(skipped, []);
  assert.equal(rows[0]!.id, 'geo3k-2401');
  assert.match(rows[0]!.images[0]!, /^blob:cas\/.*\.png$/);
});
