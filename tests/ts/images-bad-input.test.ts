// Image intake against hostile and broken input: every case is a typed ImageError naming the image.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import sharp from 'sharp';
import { LocalBlobStore } from '../../stores/blobstore.js';
import {
  ImageError,
  ImageIntake,
  imageDataUrl,
  normalizeToPng,
  repairDataUrl,
  sniffImageType,
  type ImageErrorCode,
} from '../../lib/images.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-images-'));
const root = path.join(tmp, 'root');
mkdirSync(root);
const store = new LocalBlobStore(path.join(tmp, 'blobs'));
const intake = (extra: Partial<ConstructorParameters<typeof ImageIntake>[0]> = {}) =>
  new ImageIntake({ store, roots: [root], baseDir: root, ...extra });

const png = (w = 64, h = 48, noise = false) =>
  sharp({
    create: {
      width: w,
      height: h,
      channels: 3,
      background: '#3366cc',
      ...(noise ? { noise: { type: 'gaussian', mean: 128, sigma: 60 } } : {}),
    },
  })
    .png()
    .toBuffer();

function crc32(buf: Uint8Array): number {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return ~c >>> 0;
}

/** A valid small PNG whose IHDR claims width × height (CRC fixed), like a decompression bomb header. */
async function pngWithHeader(width: number, height: number): Promise<Buffer> {
  const b = Buffer.from(await png(8, 8));
  b.writeUInt32BE(width, 16);
  b.writeUInt32BE(height, 20);
  b.writeUInt32BE(crc32(b.subarray(12, 29)), 29);
  return b;
}

async function rejects(p: Promise<unknown>, code: ImageErrorCode, mention?: RegExp): Promise<ImageError> {
  try {
    await p;
  } catch (err) {
    assert.ok(
      err instanceof ImageError,
      `expected ImageError, got ${(err as Error)?.name}: ${(err as Error)?.message}`,
    );
    assert.equal(err.code, code, err.message);
    if (mention) assert.match(err.message, mention);
    return err;
  }
  assert.fail(`expected ${code}`);
}

test('a valid PNG is normalised and stored once however often it is used', async () => {
  const bytes = await png();
  writeFileSync(path.join(root, 'ok.png'), bytes);
  const i = intake();
  const refs = await Promise.all(Array.from({ length: 8 }, (_, k) => i.ingest(k % 2 ? 'ok.png' : bytes, k)));
  assert.equal(new Set(refs).size, 1);
  assert.match(refs[0]!, /^blob:cas\/[0-9a-f]{2}\/[0-9a-f]{64}\.png$/);
  const casDir = path.dirname(store.pathOf(refs[0]!));
  assert.equal(readdirSync(casDir).filter((f) => f.endsWith('.png')).length, 1);
  // a second intake (another dataset load) finds the same blob
  assert.equal(await intake().ingest(bytes), refs[0]);
  const url = await imageDataUrl(store, refs[0]!);
  assert.match(url, /^data:image\/png;base64,iVBOR/);
});

test('JPEG and WebP are converted to PNG', async () => {
  for (const fmt of ['jpeg', 'webp'] as const) {
    const bytes = await sharp(await png())
      .toFormat(fmt)
      .toBuffer();
    const ref = await intake().ingest(bytes);
    assert.equal(sniffImageType(await store.getBytes(ref)), 'png');
    const meta = await sharp(await store.getBytes(ref)).metadata();
    assert.deepEqual([meta.format, meta.width, meta.height], ['png', 64, 48]);
  }
});

test('corrupt PNG (signature, then garbage)', async () => {
  const bytes = Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    Buffer.from('garbage'.repeat(50)),
  ]);
  await rejects(intake().ingest(bytes, 7), 'corrupt', /row 7/);
});

test('truncated PNG file', async () => {
  const full = await png(256, 256, true);
  writeFileSync(path.join(root, 'truncated.png'), full.subarray(0, Math.floor(full.length / 2)));
  const err = await rejects(intake().ingest('truncated.png', 3), 'corrupt');
  assert.match(err.message, /row 3: image truncated\.png/);
});

test('a 50000×50000 header is refused before decoding', async () => {
  const bomb = await pngWithHeader(50_000, 50_000);
  const t0 = performance.now();
  await rejects(intake().ingest(bomb), 'too_many_pixels', /50000×50000/);
  assert.ok(performance.now() - t0 < 2000);
  await rejects(normalizeToPng(await png(200, 200), { maxPixels: 100 * 100, maxBytes: 1e6 }), 'too_many_pixels');
});

test('paths: .., absolute elsewhere, file://, symlinks out of the root are refused', async () => {
  await rejects(intake().ingest('../../etc/passwd', 1), 'refused_path', /row 1: image \.\.\/\.\.\/etc\/passwd/);
  await rejects(intake().ingest('images/../../x.png'), 'refused_path', /\.\./);
  await rejects(intake().ingest('/etc/passwd'), 'refused_path', /outside/);
  await rejects(intake().ingest('file:///etc/passwd'), 'refused_url', /file/);
  await rejects(intake().ingest({ path: 'file:///etc/hostname' }), 'refused_url');
  await rejects(intake().ingest('ftp://example.com/a.png'), 'refused_url');
  symlinkSync('/etc/passwd', path.join(root, 'link.png'));
  await rejects(intake().ingest('link.png'), 'refused_path', /symlink/);
  await rejects(intake().ingest(path.join(root, 'link.png')), 'refused_path', /symlink/);
  await rejects(intake().ingest('missing.png'), 'not_found');
  await rejects(new ImageIntake({ store, roots: [] }).ingest('ok.png'), 'refused_path', /image_roots/);
});

test('non-image bytes, an empty file, SVG and oversized files', async () => {
  await rejects(intake().ingest(Buffer.from('root:x:0:0:root:/root:/bin/bash\n')), 'not_an_image');
  writeFileSync(path.join(root, 'empty.png'), '');
  await rejects(intake().ingest('empty.png'), 'not_an_image', /empty/);
  await rejects(intake().ingest({ bytes: null, path: null }), 'bad_source');
  const svg = Buffer.from(
    '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><image href="file:///etc/passwd"/></svg>',
  );
  await rejects(intake().ingest(svg), 'unsupported_format', /svg/);
  writeFileSync(path.join(root, 'big.png'), await png(256, 256, true));
  await rejects(intake({ maxBytes: 1000 }).ingest('big.png'), 'too_many_bytes');
  await rejects(intake({ maxBytes: 1000 }).ingest(`data:image/png;base64,${'A'.repeat(5000)}`), 'too_many_bytes');
});

test('data URLs: image/None is repaired to the real type', async () => {
  const b64 = (await png()).toString('base64');
  const bad = `data:image/None;base64,${b64}`;
  assert.equal(repairDataUrl(bad), `data:image/png;base64,${b64}`);
  const jpeg = (
    await sharp(await png())
      .jpeg()
      .toBuffer()
  ).toString('base64');
  assert.equal(repairDataUrl(`data:image/None;base64,${jpeg}`), `data:image/jpeg;base64,${jpeg}`);
  assert.equal(repairDataUrl(`data:image/png;base64,${b64}`), `data:image/png;base64,${b64}`);
  assert.match(await intake().ingest(bad), /^blob:cas\//);
  await rejects(intake().ingest('data:image/png;base64,bm90IGFuIGltYWdl'), 'not_an_image');
});

test('http(s): refused unless the host is allowlisted', async () => {
  const bytes = await png();
  const server = http.createServer((req, res) => {
    if (req.url === '/redirect') {
      res.writeHead(302, { location: 'http://169.254.169.254/' }).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'image/png' }).end(bytes);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    await rejects(intake().ingest(`${url}/a.png`), 'refused_url', /allow_hosts/);
    await rejects(intake({ allowHosts: ['example.com'] }).ingest(`${url}/a.png`), 'refused_url');
    assert.match(await intake({ allowHosts: ['127.0.0.1'] }).ingest(`${url}/a.png`), /^blob:cas\//);
    await rejects(intake({ allowHosts: ['127.0.0.1'] }).ingest(`${url}/redirect`), 'fetch_failed');
  } finally {
    server.close();
  }
});
