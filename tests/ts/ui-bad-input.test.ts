// tempo-rl ui and bad input, in process (no browser, no Temporal server): --host checked by address
// (every spelling of "every interface" refused, non-loopback only with --allow-remote), a 403 that
// does not tell a foreign page the name to send, and step records that cannot be read (a FIFO, a
// truncated file) answered at once, named, without taking the other runs down.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { stateLayout } from '../../stores/layout.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { removeTestState } from '../../testing/state.js';
import { forgetRecords } from '../../ui/records.js';
import { resolveUiHost, uiApp } from '../../ui/server.js';
import { TemporalGate } from '../../ui/temporal-gate.js';

const state = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-ui-bad-'));
after(() => removeTestState(state));
const cfg = loadConfig({ env: {}, sets: [`state_dir=${state}`] });
const app = uiApp(
  {
    cfg,
    temporal: new TemporalGate(null),
    store: new LocalBlobStore(stateLayout(state).blobs),
    decoder: () => ({ piece: String, text: (ids) => ids.join(' ') }),
    temporalUi: null,
  },
  () => new Set(['127.0.0.1:8288', 'localhost:8288']),
);
const get = (p: string, host = '127.0.0.1:8288') => app.request(p, { headers: { Host: host } });

const refusal = async (host: string, allowRemote = false) => {
  try {
    await resolveUiHost(host, 0, { allowRemote });
    return null;
  } catch (err) {
    return err as Error & { exitCode?: number };
  }
};

describe('--host is checked by address, before anything starts', () => {
  for (const host of ['0', '::0', '0:0:0:0:0:0:0:0', '0.0.0.0', '::', '::ffff:0.0.0.0'])
    test(`--host ${host} is every interface`, async () => {
      const err = await refusal(host);
      assert.equal(err?.exitCode, 2, String(err));
      assert.match(err!.message, /every interface of this machine/);
      assert.ok(err!.message.includes(JSON.stringify(host)));
      // not even with --allow-remote: the Host check needs the one name the browser uses
      assert.match((await refusal(host, true))?.message ?? '', /every interface/);
    });
  for (const host of ['127.0.0.1', 'localhost', '::1', '127.1'])
    test(`--host ${host} is loopback`, async () => {
      assert.equal(await refusal(host), null);
    });
  test('--host a non-loopback address needs --allow-remote, and then warns', async (t) => {
    const mine = Object.values(os.networkInterfaces())
      .flat()
      .find((i) => i && i.family === 'IPv4' && !i.internal)?.address;
    if (!mine) return t.skip('this machine has no non-loopback IPv4 address');
    assert.match((await refusal(mine))?.message ?? '', /is not a loopback address: .* pass --allow-remote/);
    const warnings: string[] = [];
    assert.deepEqual(await resolveUiHost(mine, 0, { allowRemote: true, warn: (l) => warnings.push(l) }), {
      host: mine,
      loopback: false,
    });
    assert.match(warnings[0] ?? '', /no authentication/);
  });
  test('--host that does not resolve, or is not this machine: a sentence, no server started', async () => {
    assert.match(
      (await refusal('nosuch.invalid'))?.message ?? '',
      /--host "nosuch\.invalid": no such host \(ENOTFOUND\)/,
    );
    assert.match((await refusal('192.0.2.1', true))?.message ?? '', /cannot listen there \(EADDRNOTAVAIL\)/);
  });
});

test('a foreign Host is refused without naming the Host to send', async () => {
  const res = await get('/api/runs', 'attacker.example:8288');
  assert.equal(res.status, 403);
  const body = await res.text();
  assert.match(body, /attacker\.example/);
  assert.doesNotMatch(body, /127\.0\.0\.1|localhost/);
});

describe('step records that cannot be read', () => {
  const steps = (run: string) => {
    const d = path.join(stateLayout(state).runs, run, 'steps');
    mkdirSync(d, { recursive: true });
    return d;
  };
  const record = { run_id: 'good', step: 0, metrics: { 'rollout/raw_reward': 0.5 }, weight_version: 1, episodes: [] };
  writeFileSync(path.join(steps('good'), 'step-0.json'), JSON.stringify(record));
  execFileSync('mkfifo', [path.join(steps('fifo'), 'step-0.json')]);
  writeFileSync(path.join(steps('cut'), 'step-0.json'), JSON.stringify(record).slice(0, 20));

  test('a FIFO step record: refused at once, naming it, and many such requests block nothing', async () => {
    forgetRecords();
    const t0 = Date.now();
    const answers = await Promise.all(Array.from({ length: 6 }, () => get('/api/runs/fifo')));
    assert.ok(Date.now() - t0 < 5_000, `${Date.now() - t0} ms`);
    for (const res of answers) {
      assert.equal(res.status, 500);
      assert.match(await res.text(), /runs\/fifo\/steps\/step-0\.json: it is a FIFO/);
    }
    assert.equal((await get('/api/runs/good')).status, 200);
  });
  test('a truncated step record: a 500 naming the file', async () => {
    const res = await get('/api/runs/cut');
    assert.equal(res.status, 500);
    assert.match(await res.text(), /runs\/cut\/steps\/step-0\.json: not JSON/);
  });
  test('the runs list leaves an unreadable run out with a note, and lists the others', async () => {
    const res = await get('/api/runs');
    assert.equal(res.status, 200);
    const body = (await res.json()) as {
      runs: Array<{ run_id: string }>;
      skipped: Array<{ run_id: string; error: string }>;
    };
    assert.deepEqual(
      body.runs.map((r) => r.run_id),
      ['good'],
    );
    assert.deepEqual(body.skipped.map((s) => s.run_id).sort(), ['cut', 'fifo']);
    assert.match(body.skipped.find((s) => s.run_id === 'fifo')!.error, /FIFO/);
  });
});
