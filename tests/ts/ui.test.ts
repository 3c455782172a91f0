// tempo-rl ui in a real browser (Debian's chromium through playwright-core) over a run with real
// histories (testing/run-standins.ts: the real workflows and rollout activities, a scripted engine, a
// stand-in trainer): the runs page, click through run → step → group → episode, the episode page
// against auditEpisode (what `episodes show --json` prints), model text holding markup rendered as
// text, refusals (foreign Host or Origin, ids outside the state dir, writes), and a live run's page
// that follows its steps without a reload. Screenshots go to a folder the test prints
// (TEMPO_RL_UI_SCREENSHOTS=DIR keeps them).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { auditEpisode } from '../../client/audit.js';
import { syntheticProblems } from '../../lib/data/synth.js';
import { selectPrompts } from '../../lib/prompt-order.js';
import { stateLayout } from '../../stores/layout.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { decode, toolCall } from '../../testing/episode-engine-double.js';
import { startStandinRuns, type StandinRuns } from '../../testing/run-standins.js';
import { startUi, type UiServer } from '../../ui/server.js';
import { TemporalGate } from '../../ui/temporal-gate.js';
import { CHROMIUM, CHROMIUM_ARGS } from '../../testing/chromium.js';

const skip = existsSync(CHROMIUM) ? false : `no browser at ${CHROMIUM} (Debian's chromium package)`;
const MARKUP = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">';
const RUN = 'browse';
/** Sample 1 of prompt 1 in step 0 writes markup in each turn. */
const MARKUP_EPISODE = `${RUN}/0/1/1`;
const RETRY_CAUSE = 'the stand-in engine dropped the connection';

let h: StandinRuns;
let store: LocalBlobStore;
let ui: UiServer;
let browser: Browser;
let shots: string;

/** The label of each training prompt (`step/prompt`) of the stand-in runs' synthetic data, in the
 *  order the run draws them: sample 0 answers it, sample 1 answers "7" (right for none). */
function trainLabels(cfg: StandinRuns['cfg'], steps: number): Map<string, string> {
  const { synthetic_size: size, synthetic_seed: seed } = cfg.dataset;
  const problems = syntheticProblems(size, seed, 'angle_facts');
  const labels = new Map<string, string>();
  let at = { epoch: 0, cursor: 0 };
  for (let step = 0; step < steps; step++) {
    const pick = selectPrompts(size, cfg.rollout.seed, at, cfg.rollout.prompts_per_step);
    pick.indices.forEach((i, prompt) => labels.set(`${step}/${prompt}`, problems[i]!.answer));
    at = pick.next;
  }
  return labels;
}

before(async () => {
  if (skip) return;
  h = await startStandinRuns();
  const labels = trainLabels(h.cfg, 8);
  const calls = new Map<string, number>();
  h.script = (req) => {
    const [step, prompt, sample] = req.session_id.split('/').slice(-3);
    const n = calls.get(req.session_id) ?? 0;
    calls.set(req.session_id, n + 1);
    // the markup episode's second turn fails once: the page diffs its two attempts
    if (req.session_id === MARKUP_EPISODE && n === 1)
      return { text: '', fail: Object.assign(new Error(RETRY_CAUSE), { engine: 'http://standin-engine' }) };
    const answer = Number(sample) % 2 === 0 ? (labels.get(`${step}/${prompt}`) ?? '60') : '7';
    const text = req.session_id === MARKUP_EPISODE ? `${MARKUP} ${toolCall(answer)}` : toolCall(answer);
    // first turns get varied logprobs (one per character up to the stop string) for the token view
    const cut = text.slice(0, text.indexOf('</tool_call>') + '</tool_call>'.length);
    return n === 0 ? { text, logprobs: [...cut].map((_, i) => -((i * 0.37) % 5)) } : { text };
  };
  await h.start(h.plan(RUN, ['run.steps=2', 'run.eval_at_start=true', 'run.eval_interval=2', 'run.eval_prompts=2']));
  assert.equal((await h.result(RUN)).status, 'completed');
  store = new LocalBlobStore(stateLayout(h.cfg.state_dir).blobs);
  ui = await startUi(
    {
      cfg: h.cfg,
      temporal: new TemporalGate(h.client),
      store,
      // the engine double's character tokenizer
      decoder: () => ({ piece: (id) => decode([id]), text: decode }),
      temporalUi: 'http://127.0.0.1:8233',
    },
    { host: '127.0.0.1', port: 0 },
  );
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  // TEMPO_RL_UI_SCREENSHOTS: a folder that outlives the test (CI keeps it as the test's output).
  shots = process.env.TEMPO_RL_UI_SCREENSHOTS || path.join(h.cfg.state_dir, 'ui-screenshots');
  mkdirSync(shots, { recursive: true });
  console.log(
    `screenshots: ${shots}${process.env.TEMPO_RL_UI_SCREENSHOTS ? '' : ' (kept with TEMPO_RL_KEEP_TEST_STATE=1, or give TEMPO_RL_UI_SCREENSHOTS=DIR)'}`,
  );
});

after(async () => {
  await browser?.close();
  await ui?.close();
  await h?.close();
});

async function newPage(): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems: string[] = [];
  page.on('console', (m) => {
    // a failed load is reported below with its address
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.status()} ${r.url()}`);
  });
  return { page, problems };
}

const ready = (page: Page, view: string) => page.waitForSelector(`main[data-ready="${view}"]`, { timeout: 30_000 });

/** The number as the page writes it (dom.js num). */
const shown = (v: number | null) => (v === null ? '-' : Number.isInteger(v) ? String(v) : v.toFixed(3));

/** A request with headers a browser would not let a page set (Host). */
function rawGet(
  pathAndQuery: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: ui.port,
        path: pathAndQuery,
        method,
        headers: { Host: `127.0.0.1:${ui.port}`, ...headers },
      },
      (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode!, body, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** From the runs page to the markup episode by clicks: runs → run → step 0 → prompt 1 → sample 1. */
async function clickToEpisode(page: Page): Promise<void> {
  await page.goto(ui.url);
  await ready(page, 'runs');
  assert.equal(await page.locator(`tr[data-run="${RUN}"]`).count(), 1, 'the runs page lists the run');
  await page.screenshot({ path: path.join(shots, 'runs.png'), fullPage: true });

  await page.click(`tr[data-run="${RUN}"] a.run-link`);
  await ready(page, 'run');
  assert.equal((await page.textContent('#run-step'))?.trim(), 'step 2 / 2');
  assert.ok((await page.locator('figure.plot .uplot').count()) >= 2, 'metric plots drawn');
  await page.screenshot({ path: path.join(shots, 'run.png'), fullPage: true });

  await page.locator('a.step-link', { hasText: 'step 0' }).click();
  await ready(page, 'step');
  assert.equal(await page.locator('article.group').count(), 2, 'two GRPO groups');
  assert.equal(await page.textContent('[data-count="trained"]'), '4');
  await page.screenshot({ path: path.join(shots, 'step.png'), fullPage: true });

  await page.click(`article[data-group="${RUN}/0/1"] a.group-link`);
  // the same view again: its old render says data-ready="step" until the hash change re-renders it
  await page.waitForSelector('main[data-ready="step"] .groups.focused', { timeout: 30_000 });
  assert.equal(await page.locator('article.group').count(), 1, 'the group alone');
  await page.click(`tr[data-episode="${MARKUP_EPISODE}"] a.episode-link`);
  await ready(page, 'episode');
}

/** The episode page's turns and facts against auditEpisode's result; returns the turns' texts. */
async function checkEpisodePage(page: Page): Promise<string[]> {
  const audit = await auditEpisode(h.client, store, MARKUP_EPISODE);
  const turns = await page.$$eval('article.turn', (els) =>
    els.map((e) => ({
      text: e.querySelector('[data-field="text"]')?.textContent ?? '',
      finish: e.querySelector('[data-field="finish_reason"]')?.textContent,
      weights: e.querySelector('[data-field="weight_version"]')?.textContent,
      engine: e.querySelector('[data-field="engine"]')?.textContent,
    })),
  );
  assert.equal(turns.length, audit.turns.length);
  assert.ok(audit.turns.length >= 2, 'a wrong answer gets a second turn');
  audit.turns.forEach((t, i) => {
    assert.equal(turns[i]!.text, t.text, `turn ${i}'s text`);
    assert.equal(turns[i]!.finish, t.finish_reason);
    assert.equal(turns[i]!.weights, t.weight_version === null ? '-' : `v${t.weight_version}`);
    assert.equal(turns[i]!.engine, t.engine);
  });
  assert.equal(await page.textContent('[data-field="reward"]'), shown(audit.reward));
  assert.equal(await page.textContent('[data-field="status"]'), audit.status);
  assert.equal(
    await page.getAttribute('a.history-link', 'href'),
    `http://127.0.0.1:8233/namespaces/default/workflows/${encodeURIComponent(`episode/${MARKUP_EPISODE}`)}`,
  );
  const api = (await (await fetch(`${ui.url}api/episode?id=${encodeURIComponent(MARKUP_EPISODE)}`)).json()) as {
    audit: unknown;
    tokens: unknown[];
  };
  assert.deepEqual(api.audit, JSON.parse(JSON.stringify(audit)), 'the API sends auditEpisode’s result as is');
  assert.equal(await page.locator('.tokens .tok').count(), api.tokens.length, 'one span per response token');
  return turns.map((t) => t.text);
}

test('runs → run → step → group → episode: the episode page shows what auditEpisode gives', {
  skip,
  timeout: 120_000,
}, async () => {
  const { page, problems } = await newPage();
  try {
    await clickToEpisode(page);
    const texts = await checkEpisodePage(page);
    // the markup the model wrote is text: shown verbatim, never run
    assert.ok(texts[0]!.includes(MARKUP));
    assert.equal(await page.evaluate(() => (window as { __pwned?: unknown }).__pwned), undefined);
    assert.equal(await page.locator('main script, main img[src="x"]').count(), 0);
    await page.screenshot({ path: path.join(shots, 'episode.png'), fullPage: true });
    assert.deepEqual(problems, [], 'no script error and no Content-Security-Policy violation');
  } finally {
    await page.close();
  }
});

test('search a run by text and reward, a page at a time', { skip, timeout: 60_000 }, async () => {
  const { page, problems } = await newPage();
  try {
    await page.goto(`${ui.url}#/search?run=${RUN}&text=onerror`);
    await ready(page, 'search');
    const ids = await page.$$eval('table.results tr[data-episode]', (rows) =>
      rows.map((r) => (r as HTMLElement).dataset.episode),
    );
    assert.deepEqual(ids, [MARKUP_EPISODE]);
    assert.ok((await page.textContent('table.results td.excerpt'))!.includes('onerror'));
    assert.equal(await page.evaluate(() => (window as { __pwned?: unknown }).__pwned), undefined);

    const right = (await (await fetch(`${ui.url}api/runs/${RUN}/episodes?reward_min=1&limit=1`)).json()) as {
      total: number;
      rows: Array<{ reward: number }>;
    };
    assert.equal(right.rows.length, 1, 'one per page');
    assert.ok(right.total >= 1 && right.rows.every((r) => r.reward >= 1));
    const all = (await (await fetch(`${ui.url}api/runs/${RUN}/episodes`)).json()) as { total: number };
    assert.equal(all.total, 8, '2 steps × 2 prompts × 2 samples');
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

test('advantages are the trainer’s: (r − mean) / (std + 1e-6) over the group’s trained samples', { skip }, async () => {
  type Row = { reward: number; advantage: number | null; outcome: string };
  let nonZero = 0;
  for (const step of [0, 1]) {
    const view = (await (await fetch(`${ui.url}api/runs/${RUN}/steps/${step}`)).json()) as {
      groups: Array<{ rows: Row[] }>;
    };
    for (const g of view.groups) {
      const trained = g.rows.filter((r) => r.outcome === 'trained');
      const rewards = trained.map((r) => r.reward);
      const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
      const std = Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / (rewards.length - 1));
      for (const r of trained)
        assert.ok(
          Math.abs(r.advantage! - (std === 0 ? 0 : (r.reward - mean) / (std + 1e-6))) < 1e-9,
          `step ${step}: advantage ${r.advantage} of reward ${r.reward}`,
        );
      nonZero += trained.filter((r) => r.advantage !== 0).length;
    }
  }
  assert.ok(nonZero >= 2, 'a group with a right and a wrong answer');
});

test('without a Temporal server: runs from their step records, episodes from their samples', {
  skip,
  timeout: 60_000,
}, async () => {
  const offline = await startUi(
    {
      cfg: h.cfg,
      temporal: new TemporalGate(null),
      store,
      decoder: () => ({ piece: (id) => decode([id]), text: decode }),
      temporalUi: null,
    },
    { host: '127.0.0.1', port: 0 },
  );
  const { page, problems } = await newPage();
  try {
    const runs = (await (await fetch(`${offline.url}api/runs`)).json()) as {
      temporal: boolean;
      runs: Array<{ run_id: string; status: string; step: number }>;
    };
    assert.equal(runs.temporal, false);
    assert.deepEqual(
      runs.runs.find((r) => r.run_id === RUN),
      { ...runs.runs.find((r) => r.run_id === RUN), status: 'recorded', step: 2 },
    );
    await page.goto(`${offline.url}#/episode?id=${encodeURIComponent(MARKUP_EPISODE)}`);
    await ready(page, 'episode');
    const audit = await auditEpisode(h.client, store, MARKUP_EPISODE);
    const texts = await page.$$eval('article.turn [data-field="text"]', (els) => els.map((e) => e.textContent));
    assert.equal(texts.length, audit.turns.length);
    assert.equal(texts[0], audit.turns[0]!.text, 'the first turn’s text decoded from its tokens');
    assert.match((await page.textContent('p.warn')) ?? '', /no Temporal server/);
    assert.equal(await page.evaluate(() => (window as { __pwned?: unknown }).__pwned), undefined);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
    await offline.close();
  }
});

test('refused: a foreign Host or Origin, ids outside the state dir, bad parameters, writes', { skip }, async () => {
  assert.equal((await rawGet('/api/runs')).status, 200);
  assert.equal((await rawGet('/api/runs', { Host: `localhost:${ui.port}` })).status, 200, 'a loopback name');
  const foreignHost = await rawGet('/api/runs', { Host: `attacker.example:${ui.port}` });
  assert.equal(foreignHost.status, 403);
  assert.match(foreignHost.body, /attacker\.example/);
  assert.equal((await rawGet('/', { Host: 'attacker.example' })).status, 403, 'a DNS-rebound page');
  assert.equal((await rawGet('/api/runs', { Origin: 'http://attacker.example' })).status, 403);
  assert.equal((await rawGet('/api/runs', { 'Sec-Fetch-Site': 'cross-site' })).status, 403);
  assert.equal((await rawGet('/api/runs', { Origin: `http://127.0.0.1:${ui.port}` })).status, 200);
  assert.equal((await rawGet('/api/runs', {}, 'POST')).status, 405, 'read-only');

  const outside = await rawGet('/api/runs/..%2F..%2Fetc');
  assert.equal(outside.status, 400);
  assert.match(outside.body, /run id/);
  assert.equal((await rawGet('/api/runs/.hidden/steps/0')).status, 400);
  assert.equal((await rawGet(`/api/episode?id=${encodeURIComponent('../../etc/0/0/0')}`)).status, 400);
  assert.equal((await rawGet(`/api/episode?id=${encodeURIComponent(`${RUN}/0/1`)}`)).status, 400, 'not an episode id');
  assert.equal((await rawGet(`/api/episode/image?id=${encodeURIComponent(MARKUP_EPISODE)}&index=7`)).status, 404);
  assert.equal((await rawGet('/api/runs/no-such-run')).status, 404);
  assert.equal((await rawGet('/vendor/..%2F..%2Fpackage.json')).status, 404, 'only the listed files');
  const bad = await rawGet(`/api/runs/${RUN}/episodes?reward_min=abc`);
  assert.equal(bad.status, 400);
  assert.match(bad.body, /reward_min.*abc/);
  assert.equal((await rawGet(`/api/runs/${RUN}/episodes?sort=x`)).status, 400, 'an unknown parameter');

  const page = await rawGet('/');
  assert.match(String(page.headers['content-security-policy']), /script-src 'self'/);
  assert.doesNotMatch(String(page.headers['content-security-policy']), /unsafe-inline/);
  assert.equal(page.headers['x-content-type-options'], 'nosniff');
});

test('a live run’s page follows its steps without a reload', { skip, timeout: 120_000 }, async () => {
  h.latency.train_ms = 1500;
  const { page, problems } = await newPage();
  try {
    await h.start(h.plan('live', ['run.steps=4']));
    await page.goto(`${ui.url}#/run?id=live`);
    await ready(page, 'run');
    const stepNow = async () => Number(/step (\d+)/.exec((await page.textContent('#run-step')) ?? '')?.[1]);
    const first = await stepNow();
    assert.ok(first < 3, `the run page opened at step ${first}`);
    await page.evaluate(() => {
      (window as { __samePage?: boolean }).__samePage = true;
    });
    await page.waitForFunction(
      (n) => Number(/step (\d+)/.exec(document.getElementById('run-step')?.textContent ?? '')?.[1]) >= n,
      first + 2,
      { timeout: 60_000 },
    );
    assert.equal(await page.evaluate(() => (window as { __samePage?: boolean }).__samePage), true, 'no reload');
    assert.equal((await h.result('live')).status, 'completed');
    assert.deepEqual(problems, []);
  } finally {
    h.latency.train_ms = 50;
    await page.close();
  }
});
