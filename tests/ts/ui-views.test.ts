// tempo-rl ui's views over recorded runs, in Debian's chromium through playwright-core: two runs
// written straight to a state dir as a run leaves them (testing/ui-runs.ts: step records, samples,
// the trainer's per-token logprobs; no engine) and a Temporal server that does not answer. Checked:
// the banner that says so (the pages answer from the records at once); a run's held-out eval
// before → after with its delta; small values on a plot's axis; the prompt (system, user, figure) on
// the episode and group pages and a group's completions side by side; the trainer's logprobs beside
// the engine's, each token coloured by their difference; 2 runs compared; a table sorted by a column
// and exported as CSV; a refused search value reported under the form, which keeps it.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, unlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { after, before, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { loadConfig } from '../../config/load.js';
import { stateLayout } from '../../stores/layout.js';
import { lazyClient } from '../../supervise/temporal.js';
import { LocalBlobStore } from '../../stores/blobstore.js';
import { CHROMIUM, CHROMIUM_ARGS } from '../../testing/chromium.js';
import { decode } from '../../testing/episode-engine-double.js';
import { removeTestState } from '../../testing/state.js';
import { FIXTURE_QUESTION, FIXTURE_SYSTEM, type FixtureRun, writeFixtureRun } from '../../testing/ui-runs.js';
import { startUi, type UiServer } from '../../ui/server.js';
import { TemporalGate } from '../../ui/temporal-gate.js';
import { trainerLogprobsKey } from '../../ui/trainer-logprobs.js';

const skip = existsSync(CHROMIUM) ? false : `no browser at ${CHROMIUM} (Debian's chromium package)`;

let state: string;
let ui: UiServer;
let browser: Browser;
let client: Client | null = null;
let a: FixtureRun;
let b: FixtureRun;

before(async () => {
  if (skip) return;
  state = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-ui-views-'));
  const cfg = loadConfig({ env: {}, sets: [`state_dir=${state}`] });
  const store = new LocalBlobStore(stateLayout(state).blobs);
  a = await writeFixtureRun(cfg, store, 'fixture-a');
  b = await writeFixtureRun(cfg, store, 'fixture-b', { steps: 2, evalBefore: 0.5, evalAfter: 0.25 });
  // a server that does not answer: nothing listens on port 1
  client = lazyClient(loadConfig({ env: {}, sets: [`state_dir=${state}`, 'temporal.address=127.0.0.1:1'] }));
  ui = await startUi(
    {
      cfg,
      temporal: new TemporalGate(client, { address: '127.0.0.1:1', deadlineMs: 300 }),
      store,
      decoder: () => ({ piece: (id) => decode([id]), text: decode }),
      temporalUi: null,
    },
    { host: '127.0.0.1', port: 0 },
  );
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
});

after(async () => {
  await browser?.close();
  await ui?.close();
  await client?.connection.close().catch(() => undefined);
  if (state) removeTestState(state);
});

async function newPage(): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 }, acceptDownloads: true });
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('response', (r) => {
    // a refused search value is the one 400 a page asks for on purpose
    if (r.status() >= 400 && !r.url().includes('reward_min=abc')) problems.push(`${r.status()} ${r.url()}`);
  });
  return { page, problems };
}

const ready = (page: Page, view: string) => page.waitForSelector(`main[data-ready="${view}"]`, { timeout: 30_000 });

async function withPage(fn: (page: Page) => Promise<void>): Promise<void> {
  const { page, problems } = await newPage();
  try {
    await fn(page);
    assert.deepEqual(problems, [], 'no script error and no Content-Security-Policy violation');
  } finally {
    await page.close();
  }
}

test('a server that does not answer: a banner, and the runs from their step records', { skip }, async () => {
  await withPage(async (page) => {
    await page.goto(ui.url);
    await ready(page, 'runs');
    assert.equal(await page.locator('tr[data-run]').count(), 2);
    await page.waitForSelector('.banner-temporal:not([hidden])', { timeout: 10_000 });
    assert.match((await page.textContent('.banner-temporal')) ?? '', /does not answer \(127\.0\.0\.1:1/);
  });
});

test('a run: the held-out eval before → after with its delta, small values on the axis', { skip }, async () => {
  await withPage(async (page) => {
    await page.goto(`${ui.url}#/run?id=${a.runId}`);
    await ready(page, 'run');
    const headline = (await page.textContent('[data-field="eval-headline"]')) ?? '';
    assert.match(headline, /0\.250 before → 0\.750 after step 2 \(\+0\.500\)/);
    assert.equal(await page.locator('[data-field="eval-headline"] .delta.up').count(), 1);
    // the pg loss plot (1.2e-4 … 3e-4): tick labels with the digits that tell them apart
    const ticks = (await page.getAttribute('figure.plot[data-keys="train/pg_loss"]', 'data-y-ticks')) ?? '';
    const shown = ticks.split(' | ').filter(Boolean);
    assert.ok(shown.length >= 2 && new Set(shown).size === shown.length, `distinct labels: ${ticks}`);
    assert.ok(!shown.some((t) => Number(t) === 0 && t !== '0'), `none rounds to 0: ${ticks}`);
    // the eval plot starts from the eval before training, at step −1
    assert.ok((await page.locator('figure.plot[data-keys="eval/reward"]').count()) === 1);
  });
});

test('the prompt on the episode and group pages; a group’s completions side by side', { skip }, async () => {
  await withPage(async (page) => {
    await page.goto(`${ui.url}#/step?run=${a.runId}&step=0&group=0`);
    await page.waitForSelector('main[data-ready="step"] .groups.focused', { timeout: 30_000 });
    assert.deepEqual(await page.$$eval('.prompt .message', (els) => els.map((e) => e.getAttribute('data-role'))), [
      'system',
      'user',
      'assistant',
    ]);
    const promptText = (await page.textContent('.prompt')) ?? '';
    assert.ok(promptText.includes(FIXTURE_SYSTEM) && promptText.includes(FIXTURE_QUESTION));
    assert.equal(await page.locator('.prompt img.figure').count(), 1, 'the figure in its place');
    // the long system message folded to its first line, opened by a click
    const folded = page.locator('.prompt .role-system details.folded');
    assert.equal(await folded.getAttribute('open'), null);
    assert.match(
      (await folded.locator('summary').textContent()) ?? '',
      /^You answer with the calc_score tool\. · 8 lines$/,
    );
    assert.equal(await folded.locator('pre.text').isVisible(), false);
    await folded.locator('summary').click();
    assert.equal(await folded.locator('pre.text').isVisible(), true);
    const completions = await page.$$eval('.completions article.completion', (els) =>
      els.map((e) => ({ episode: e.getAttribute('data-episode'), turns: e.querySelectorAll('pre.text').length })),
    );
    assert.deepEqual(completions, [
      { episode: `${a.runId}/0/0/0`, turns: 1 },
      { episode: `${a.runId}/0/0/1`, turns: 2 },
    ]);

    await page.goto(`${ui.url}#/episode?id=${encodeURIComponent(a.mismatchEpisode)}`);
    await ready(page, 'episode');
    assert.equal(await page.locator('.prompt .message').count(), 3);
    assert.equal(await page.locator('.prompt img.figure').count(), 1);
  });
});

test('the trainer’s logprobs beside the engine’s, each token coloured by the difference', { skip }, async () => {
  await withPage(async (page) => {
    await page.goto(`${ui.url}#/episode?id=${encodeURIComponent(a.mismatchEpisode)}`);
    await ready(page, 'episode');
    assert.match((await page.textContent('[data-field="mismatch"]')) ?? '', /step 0's forward/);
    assert.equal(await page.textContent('[data-field="mismatch_max"]'), '0.6000');
    await page.selectOption('select.token-mode', 'mismatch');
    await page.waitForSelector('.tokens[data-mode="mismatch"]');
    // token 3 is 0.6 off (≥ 0.5: the last class); the other generated tokens 0.001 (< 0.01)
    assert.match((await page.getAttribute('.tokens .tok[data-i="3"]', 'class')) ?? '', /\bmm4\b/);
    assert.match((await page.getAttribute('.tokens .tok[data-i="0"]', 'class')) ?? '', /\bmm0\b/);
    assert.match((await page.getAttribute('.tokens .tok[data-i="3"]', 'title')) ?? '', /· Δ -0\.6000 ·/);

    // a sample without them: the engine's colours only, and why
    const none = `${b.runId}/1/0/0`;
    unlinkSync(path.join(stateLayout(state).blobs, 'named', trainerLogprobsKey(none)));
    await page.goto(`${ui.url}#/episode?id=${encodeURIComponent(none)}`);
    await ready(page, 'episode');
    assert.equal(await page.isDisabled('select.token-mode'), true);
    assert.match((await page.textContent('.token-section')) ?? '', /No trainer logprobs for this sample/);
  });
});

test('2 runs compared: their eval side by side and one line per run', { skip }, async () => {
  await withPage(async (page) => {
    await page.goto(ui.url);
    await ready(page, 'runs');
    await page.check(`input.pick[aria-label="compare ${a.runId}"]`);
    await page.check(`input.pick[aria-label="compare ${b.runId}"]`);
    await page.click('button.compare');
    await ready(page, 'compare');
    const row = await page.$$eval('table.eval.compare tbody tr:first-child td', (els) => els.map((e) => e.textContent));
    assert.deepEqual(row, ['reward', '0.250', '0.750', '+0.500', '0.500', '0.250', '−0.250']);
    assert.ok((await page.locator('figure.plot .uplot').count()) >= 1, 'metric plots drawn');
  });
});

test('a table sorted by a column and exported as CSV', { skip }, async () => {
  await withPage(async (page) => {
    await page.goto(`${ui.url}#/search?run=${a.runId}`);
    await ready(page, 'search');
    const ids = () =>
      page.$$eval('table.results tbody tr', (rows) => rows.map((r) => (r as HTMLElement).dataset.episode ?? ''));
    const rewards = () =>
      page.$$eval('table.results tbody tr td:nth-child(2)', (tds) => tds.map((td) => Number(td.textContent)));
    const sorted = (v: number[], dir: number) => v.every((x, i) => i === 0 || dir * (x - v[i - 1]!) >= 0);
    await page.click('table.results th[data-key="reward"] button.sort');
    assert.equal(await page.getAttribute('table.results th[data-key="reward"]', 'aria-sort'), 'descending');
    const down = await rewards();
    assert.ok(down.length === 6 && sorted(down, -1) && down[0] === 1 && down[5] === 0.5, `${down}`);
    await page.click('table.results th[data-key="reward"] button.sort');
    assert.equal(await page.getAttribute('table.results th[data-key="reward"]', 'aria-sort'), 'ascending');
    assert.ok(sorted(await rewards(), 1), `${await rewards()}`);
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('button.export-csv')]);
    assert.equal(download.suggestedFilename(), `${a.runId}-episodes.csv`);
    const csv = readFileSync((await download.path())!, 'utf8')
      .trim()
      .split('\n');
    assert.equal(csv[0]!.split(',')[0], 'episode_id');
    assert.deepEqual(
      csv.slice(1).map((l) => l.split(',')[0]),
      await ids(),
      'the rows in the order shown',
    );
  });
});

test('a search value the server refuses: reported under the form, which keeps it', { skip }, async () => {
  await withPage(async (page) => {
    await page.goto(`${ui.url}#/search?run=${a.runId}&reward_min=abc`);
    await ready(page, 'search');
    assert.match((await page.textContent('.search-results p.error')) ?? '', /reward_min.*abc/);
    assert.equal(await page.inputValue('form.search input[name="reward_min"]'), 'abc');
  });
});
