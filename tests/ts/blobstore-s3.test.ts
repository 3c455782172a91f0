// The blob store interface against a real S3-compatible server: S3Proxy (filesystem backend),
// installed into the cache and started here (testing/s3-server.ts), stopped in the after hook. Where it
// cannot be installed (no network, no Java) every S3 test skips, naming what was missing.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import {
  BlobError,
  LocalBlobStore,
  openBlobStore,
  parseBlobStoreUri,
  type ConditionalBlobStore,
} from '../../stores/blobstore.js';
import { S3BlobStore } from '../../stores/blobstore-s3.js';
import { pythonBin, REPO_ROOT } from '../../base/paths.js';
import { isAlive } from '../../supervise/process.js';
import { processGroupMembers, S3ServerUnavailable, startS3Server, type S3Server } from '../../testing/s3-server.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'blobstore-s3-'));
const BUCKET = 'tempo-test';

let server: S3Server | null = null;
let skip: string | false = false;
try {
  server = await startS3Server({ dataDir: path.join(tmp, 's3data'), buckets: [BUCKET, 'other-bucket'] });
  console.log(
    `# S3Proxy ${server.version} on ${server.endpoint} (Java ${server.javaMajor}, ${server.java}; ` +
      `install ${server.install.downloaded ? `downloaded in ${server.install.ms} ms` : 'cached'}; healthy after ${server.startMs} ms)`,
  );
} catch (err) {
  if (!(err instanceof S3ServerUnavailable)) throw err;
  skip = `S3 server unavailable: ${err.message}`;
}

const opened: S3BlobStore[] = [];
after(async () => {
  for (const s of opened) s.close();
  if (server) {
    const pid = server.pid;
    await server.stop();
    assert.equal(isAlive(pid), false, 'S3Proxy still running after stop()');
    assert.deepEqual(processGroupMembers(pid), [], 'processes of the S3Proxy group left after stop()');
  }
  rmSync(tmp, { recursive: true, force: true });
});

async function s3Store(prefix = 'runs/r1', env?: NodeJS.ProcessEnv): Promise<S3BlobStore> {
  const store = await openBlobStore(`s3://${BUCKET}${prefix ? `/${prefix}` : ''}`, { env: env ?? server!.awsEnv() });
  assert.ok(store instanceof S3BlobStore);
  opened.push(store);
  return store;
}

async function keysUnder(prefix: string): Promise<string[]> {
  const client = new S3Client({
    endpoint: server!.endpoint,
    region: server!.region,
    forcePathStyle: true,
    credentials: { accessKeyId: server!.accessKey, secretAccessKey: server!.secretKey },
  });
  try {
    const res = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: prefix }));
    return (res.Contents ?? []).map((o) => o.Key!).sort();
  } finally {
    client.destroy();
  }
}

const BAD_REFS = [
  'named/x.json',
  'blob:../etc/passwd',
  'blob:/etc/passwd',
  'blob:named/../../x',
  'blob:',
  'blob:a\0b',
  'blob:\\x',
  'blob:named/..',
  'blob:.',
];

describe('BlobStore on S3 (S3Proxy)', () => {
  test('bytes: put, get, exists; the ref is content-addressed and the object sits under the prefix', {
    skip,
  }, async () => {
    const store = await s3Store();
    assert.equal(store.uri, `s3://${BUCKET}/runs/r1`);
    const data = Buffer.from('a diagram, say');
    const digest = createHash('sha256').update(data).digest('hex');
    const ref = await store.putBytes(data, 'png');
    assert.equal(ref, `blob:cas/${digest.slice(0, 2)}/${digest}.png`);
    assert.deepEqual(await store.getBytes(ref), data);
    assert.equal(await store.exists(ref), true);
    assert.equal(store.keyOf(ref), `runs/r1/cas/${digest.slice(0, 2)}/${digest}.png`);
    // On the server's disk, as the filesystem backend keeps it.
    assert.deepEqual(
      readFileSync(path.join(server!.dataDir, BUCKET, 'runs/r1/cas', digest.slice(0, 2), `${digest}.png`)),
      data,
    );
    // Binary and empty blobs come back byte for byte.
    const binary = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 131) % 256));
    assert.deepEqual(await store.getBytes(await store.putBytes(binary)), binary);
    const empty = await store.putBytes(new Uint8Array(0), 'bin');
    assert.equal((await store.getBytes(empty)).length, 0);
  });

  test('the same bytes give the same ref, the same as LocalBlobStore, and are uploaded once', { skip }, async () => {
    const store = await s3Store('cas-once');
    let puts = 0;
    store.client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'PutObjectCommand') puts++;
        return next(args);
      },
      { step: 'initialize', name: 'countPuts' },
    );
    const data = new TextEncoder().encode('one image used by 8 samples');
    const refs = await Promise.all([store.putBytes(data, 'png')]);
    for (let i = 0; i < 7; i++) refs.push(await store.putBytes(data, 'png'));
    assert.equal(new Set(refs).size, 1);
    assert.equal(puts, 1, 'the object was uploaded again');
    assert.equal((await keysUnder('cas-once/')).length, 1);
    const local = new LocalBlobStore(path.join(tmp, 'local-cas'));
    assert.equal(await local.putBytes(data, 'png'), refs[0]);
  });

  test('named JSON: put, get, overwrite, namedRef; UTF-8 intact', { skip }, async () => {
    const store = await s3Store();
    const value = { step: 3, text: 'ü → ∠ABC = 40°', nested: [1, null, { a: true }] };
    const ref = await store.putJson('samples/r1/3/0.json', value);
    assert.equal(ref, 'blob:named/samples/r1/3/0.json');
    assert.equal(store.namedRef('samples/r1/3/0.json'), ref);
    assert.deepEqual(await store.getJson(ref), value);
    await store.putJson('samples/r1/3/0.json', { replaced: true });
    assert.deepEqual(await store.getJson(ref), { replaced: true });
    assert.equal(await store.exists(ref), true);
    // Normalised like a path: the same object as LocalBlobStore's same file.
    assert.equal(store.keyOf('blob:named/samples/./r1//x/../3/0.json'), 'runs/r1/named/samples/r1/3/0.json');
    assert.deepEqual(await store.getJson('blob:named/samples/./r1//x/../3/0.json'), { replaced: true });
    await assert.rejects(store.putJson('bad', undefined), (e) => e instanceof BlobError);
  });

  test('a missing blob is the BlobError "blob not found"; a missing bucket names the bucket', { skip }, async () => {
    const store = await s3Store();
    const ref = 'blob:named/missing.json';
    await assert.rejects(store.getBytes(ref), (e) => e instanceof BlobError && e.message === `blob not found: ${ref}`);
    await assert.rejects(store.getJson(ref), (e) => e instanceof BlobError && /blob not found/.test(e.message));
    assert.equal(await store.exists(ref), false);
    const nobucket = (await openBlobStore('s3://no-such-bucket/p', { env: server!.awsEnv() })) as S3BlobStore;
    opened.push(nobucket);
    await assert.rejects(
      nobucket.getBytes(ref),
      (e) => e instanceof BlobError && /bucket "no-such-bucket" does not exist/.test(e.message),
    );
    await assert.rejects(
      nobucket.putJson('x.json', 1),
      (e) => e instanceof BlobError && /no-such-bucket/.test(e.message),
    );
  });

  test('a blob that is not JSON is a BlobError from getJson', { skip }, async () => {
    const store = await s3Store();
    const ref = await store.putBytes(Buffer.from('{not json'), 'json');
    await assert.rejects(store.getJson(ref), (e) => e instanceof BlobError && /is not valid JSON/.test(e.message));
  });

  test('references that would leave the store are refused, as LocalBlobStore refuses them', { skip }, async () => {
    const store = await s3Store();
    const local = new LocalBlobStore(path.join(tmp, 'local-escape'));
    for (const bad of BAD_REFS) {
      assert.throws(() => store.keyOf(bad), BlobError, bad);
      await assert.rejects(store.getBytes(bad), BlobError, bad);
      assert.equal(await store.exists(bad), false, bad);
      if (bad !== 'blob:\\x') assert.throws(() => local.pathOf(bad), BlobError, bad);
    }
    await assert.rejects(store.putJson('../../outside.json', {}), BlobError);
    await assert.rejects(store.putBytes(Buffer.from('x'), '/../../../../escape'), BlobError);
    assert.deepEqual(await keysUnder('outside'), []);
  });

  test('wrong credentials fail loudly, never as "not found"', { skip }, async () => {
    const store = await s3Store('runs/r1', { ...server!.awsEnv(), AWS_SECRET_ACCESS_KEY: 'wrong' });
    await assert.rejects(
      store.exists('blob:named/x.json'),
      (e) =>
        !(e instanceof BlobError) &&
        /403|Forbidden|Signature|Access/i.test(
          `${(e as Error).name} ${(e as Error).message} ${JSON.stringify((e as { $metadata?: unknown }).$metadata)}`,
        ),
    );
    await assert.rejects(store.getBytes('blob:named/x.json'), (e) => !(e instanceof BlobError));
  });

  test('putJsonIfAbsent: of 8 racing writers exactly one creates the record, whole (If-None-Match: *)', {
    skip,
  }, async () => {
    const stores: ConditionalBlobStore[] = [
      await s3Store('commit'),
      new LocalBlobStore(path.join(tmp, 'local-commit')),
    ];
    for (const store of stores) {
      for (let round = 0; round < 3; round++) {
        const key = `checkpoints/step-${round}/COMMIT.json`;
        const results = await Promise.all(
          Array.from({ length: 8 }, (_, i) => store.putJsonIfAbsent(key, { attempt: i, pad: 'x'.repeat(50_000) })),
        );
        assert.equal(results.filter(Boolean).length, 1, `${store.uri}: ${results}`);
        const winner = results.indexOf(true);
        assert.equal((await store.getJson<{ attempt: number }>(store.namedRef(key))).attempt, winner);
        assert.equal(await store.putJsonIfAbsent(key, { late: true }), false);
      }
    }
  });

  test('TypeScript writes, Python reads the same refs; Python writes the same bytes to the same refs', {
    skip,
  }, async () => {
    const store = await s3Store('xlang');
    const image = Buffer.from(Array.from({ length: 5000 }, (_, i) => (i * 7) % 256));
    const imageRef = await store.putBytes(image, 'png');
    const docRef = await store.putJson('samples/0.json', { reward: 0.5, text: 'ü∠' });
    const script = `
import json, sys
from tempo_common.blobs import open_blob_store
args = json.load(sys.stdin)
store = open_blob_store(args["uri"])
image = store.get_bytes(args["image_ref"])
doc = store.get_json(args["doc_ref"])
out = {"uri": store.uri, "image_hex": image.hex(), "doc": doc, "exists": store.exists(args["doc_ref"]),
       "py_image_ref": store.put_bytes(image, "png"),
       "py_doc_ref": store.put_json("samples/py.json", {"from": "python", "doc": doc})}
try:
    store.get_bytes("blob:named/none.json")
except Exception as err:
    out["missing"] = f"{type(err).__name__}: {err}"
print(json.dumps(out))
`;
    const py = spawnSync(pythonBin(), ['-c', script], {
      input: JSON.stringify({ uri: store.uri, image_ref: imageRef, doc_ref: docRef }),
      env: { ...process.env, ...server!.awsEnv(), PYTHONPATH: path.join(REPO_ROOT, 'workers') },
      encoding: 'utf8',
      timeout: 120_000,
    });
    assert.equal(py.status, 0, `${pythonBin()} failed: ${py.error?.message ?? ''} ${py.stderr}`);
    const got = JSON.parse(py.stdout.trim().split('\n').pop()!);
    assert.equal(got.uri, store.uri);
    assert.equal(got.image_hex, image.toString('hex'));
    assert.deepEqual(got.doc, { reward: 0.5, text: 'ü∠' });
    assert.equal(got.exists, true);
    assert.equal(got.py_image_ref, imageRef);
    assert.equal(got.missing, 'BlobError: blob not found: blob:named/none.json');
    assert.deepEqual(await store.getJson(got.py_doc_ref), { from: 'python', doc: { reward: 0.5, text: 'ü∠' } });
    assert.equal((await keysUnder('xlang/cas/')).length, 1);
  });
});

describe('S3 server lifetime', () => {
  test('a server whose starter is SIGKILLed (no exit hook runs) goes down with it', { skip }, async () => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'testing/s3-server-child.ts', path.join(tmp, 'orphan-data')],
      {
        cwd: REPO_ROOT,
        stdio: ['pipe', 'pipe', 'ignore'],
      },
    );
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.split('\n')[0]!);
      });
      child.once('exit', (code) => reject(new Error(`helper exited ${code} before answering: ${out}`)));
    });
    const { pid } = JSON.parse(line) as { pid: number };
    assert.ok(isAlive(pid));
    child.kill('SIGKILL');
    const deadline = Date.now() + 15_000;
    while (processGroupMembers(pid).length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const left = processGroupMembers(pid);
    if (left.length) process.kill(-pid, 'SIGKILL');
    assert.deepEqual(left, [], 'the orphaned S3Proxy group outlived its starter');
  });
});

describe('openBlobStore', () => {
  test('a path or file:// URL opens a LocalBlobStore; s3:// an S3BlobStore; uri is canonical', async () => {
    const root = path.join(tmp, 'local store');
    const a = await openBlobStore(root);
    assert.ok(a instanceof LocalBlobStore);
    assert.equal(a.root, root);
    assert.equal(a.uri, `file://${root.split('/').map(encodeURIComponent).join('/')}`);
    const b = await openBlobStore(a.uri);
    assert.ok(b instanceof LocalBlobStore);
    assert.equal(b.root, root);
    const ref = await a.putJson('k.json', { v: 1 });
    assert.deepEqual(await b.getJson(ref), { v: 1 });
    assert.deepEqual(parseBlobStoreUri('relative/blobs'), { kind: 'local', root: path.resolve('relative/blobs') });
    assert.deepEqual(parseBlobStoreUri('file://localhost/tmp/x'), { kind: 'local', root: '/tmp/x' });
    assert.deepEqual(parseBlobStoreUri('s3://bucket-1/a/b/'), { kind: 's3', bucket: 'bucket-1', prefix: 'a/b' });
    assert.deepEqual(parseBlobStoreUri('s3://bucket.example'), { kind: 's3', bucket: 'bucket.example', prefix: '' });
    const s3 = await openBlobStore('s3://bucket-1//a/b/', {
      env: { AWS_ENDPOINT_URL_S3: 'http://127.0.0.1:9', AWS_ACCESS_KEY_ID: 'k', AWS_SECRET_ACCESS_KEY: 's' },
    });
    assert.ok(s3 instanceof S3BlobStore);
    assert.equal(s3.uri, 's3://bucket-1/a/b');
    s3.close();
    for (const uri of ['s3://bucket/p', a.uri]) assert.throws(() => new LocalBlobStore(uri), /openBlobStore/);
  });

  test('a bad URI is a BlobError that names the value and what is wrong', async () => {
    const cases: [unknown, RegExp][] = [
      ['', /empty/],
      ['s3://', /no bucket/],
      ['s3:bucket/x', /not of the form s3:\/\/bucket\/prefix/],
      ['s3://Bad_Bucket/x', /not a valid S3 bucket name/],
      ['s3://ab/x', /not a valid S3 bucket name/],
      ['s3://192.168.1.1/x', /not a valid S3 bucket name/],
      ['s3://key:secret@bucket/x', /credentials or a port/],
      ['s3://bucket/a/../b', /"\.\." segment/],
      ['s3://bucket/a//b', /empty/],
      ['s3://bucket/x?endpoint=http://h', /query or fragment/],
      ['gs://bucket/x', /unsupported scheme "gs:"/],
      ['http://127.0.0.1:9000/bucket', /unsupported scheme "http:"/],
      ['file://otherhost/x', /not a local file URL/],
      ['file:relative', /not a local file URL/],
      ['file:///tmp/x?y=1', /query or fragment/],
      ['/tmp/a\0b', /NUL/],
      [42, /must be a string/],
    ];
    for (const [uri, why] of cases) {
      await assert.rejects(openBlobStore(uri as string), (e) => {
        assert.ok(e instanceof BlobError, `${String(uri)}: ${e}`);
        assert.ok(e.message.startsWith(`bad blob store URI ${JSON.stringify(uri)}: `), e.message);
        assert.match(e.message, why);
        return true;
      });
    }
  });
});
