// The README's pictures of `tempo-rl ui`, taken from a real run (the demo's, say): an episode page and
// its group's page, as `tempo-rl ui` serves them over the state dir (the embedded Temporal server
// started for the histories if it is down, and stopped again if this started it), in Debian's chromium.
//
//   node --import tsx scripts/ui-screenshots.ts --run RUN [--episode ID] [--compare RUN2]… [--out docs/images] [-c CONFIG] [--set k=v]…
//
// Without --episode it picks, over the run's steps, a group whose samples' rewards differ most and in
// it the episode with the most turns (a wrong answer, the tool's feedback, another try), one that the
// feedback put right first. The pages are
// written as ui-episode.png and ui-group.png, and the run's page (its eval before → after, its plots) as
// ui-run.png; with --compare (one to three other runs), the runs list and the runs compared as
// ui-runs.png and ui-compare.png. Each is cut to --max-height pixels and stored as a palette PNG.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { chromium, type Page } from 'playwright-core';
import sharp from 'sharp';
import { releaseLookups, temporalForLookups } from '../cli/ui-command.js';
import { loadConfig } from '../config/load.js';
import { closeBlobStore, openConfiguredBlobStore } from '../lib/blob-store-config.js';
import { modelPath } from '../config/run-plan.js';
import { temporalAddress } from '../supervise/temporal.js';
import { CHROMIUM, CHROMIUM_ARGS } from '../testing/chromium.js';
import { startUi } from '../ui/server.js';
import { TemporalGate } from '../ui/temporal-gate.js';
import { tokenDecoders } from '../ui/tokens.js';

const { values } = parseArgs({
  options: {
    run: { type: 'string' },
    episode: { type: 'string' },
    compare: { type: 'string', multiple: true, default: [] },
    out: { type: 'string', default: 'docs/images' },
    config: { type: 'string', short: 'c' },
    set: { type: 'string', multiple: true, default: [] },
    width: { type: 'string', default: '1280' },
    'max-height': { type: 'string', default: '1500' },
  },
});
if (!values.run) {
  process.stderr.write('scripts/ui-screenshots.ts: --run RUN is needed (the run whose pages to take)\n');
  process.exit(2);
}
const runId = values.run;
if (values.compare.length > 3) {
  process.stderr.write(
    `scripts/ui-screenshots.ts: --compare names ${values.compare.length} runs; the page compares 2–4\n`,
  );
  process.exit(2);
}

type Row = { episode_id: string; reward: number | null; turns: number | null };
type StepView = { step: number; steps: number[]; groups: Array<{ prompt_index: number; rows: Row[] }> };

/** The step and prompt of the group whose rewards differ most (then: the longest episode in it). */
async function pickEpisode(api: (p: string) => Promise<unknown>): Promise<string> {
  const first = (await api(`runs/${encodeURIComponent(runId)}/steps/0`)) as StepView;
  let best: { score: number; episode: string } | null = null;
  for (const step of first.steps) {
    const view = step === 0 ? first : ((await api(`runs/${encodeURIComponent(runId)}/steps/${step}`)) as StepView);
    for (const g of view.groups) {
      const rewards = g.rows.map((r) => r.reward ?? 0);
      const spread = new Set(rewards).size + (Math.max(...rewards) > 0 ? 1 : 0);
      const longest = [...g.rows].sort(
        (a, b) => (b.turns ?? 0) - (a.turns ?? 0) || (b.reward ?? 0) - (a.reward ?? 0),
      )[0];
      // an answer put right after the tool's feedback shows the most
      const corrected = (longest?.turns ?? 0) > 1 && (longest?.reward ?? 0) > 0 ? 5 : 0;
      const score = spread * 10 + corrected + (longest?.turns ?? 0);
      if (longest && (!best || score > best.score)) best = { score, episode: longest.episode_id };
    }
  }
  if (!best) throw new Error(`run ${runId} has no recorded group to show`);
  return best.episode;
}

/** The page as a palette PNG of at most `maxHeight` pixels. */
async function shoot(page: Page, file: string, maxHeight: number): Promise<void> {
  const shot = await page.screenshot({ fullPage: true });
  const img = sharp(shot);
  const { width, height } = await img.metadata();
  await img
    .extract({ left: 0, top: 0, width: width!, height: Math.min(height!, maxHeight) })
    .png({ palette: true, compressionLevel: 9 })
    .toFile(file);
  process.stdout.write(`${file}\n`);
}

const cfg = loadConfig({ file: values.config, sets: values.set });
const temporal = await temporalForLookups(cfg);
const store = await openConfiguredBlobStore(cfg);
const decoders = tokenDecoders();
const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
const ui = await startUi(
  {
    cfg,
    temporal: new TemporalGate(temporal.client, { address: temporalAddress(cfg) }),
    store,
    decoder: (dir) => decoders(dir ?? modelPath(cfg)),
    temporalUi: temporal.ui,
  },
  { host: '127.0.0.1', port: 0 },
);
try {
  const api = async (p: string) => {
    const res = await fetch(`${ui.url}api/${p}`);
    if (!res.ok) throw new Error(`${p}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  const episode = values.episode ?? (await pickEpisode(api));
  const [step, prompt] = episode.split('/').slice(-3);
  const out = path.resolve(values.out);
  mkdirSync(out, { recursive: true });
  const page = await browser.newPage({ viewport: { width: Number(values.width), height: 900 } });
  const maxHeight = Number(values['max-height']);
  await page.goto(`${ui.url}#/episode?id=${encodeURIComponent(episode)}`);
  await page.waitForSelector('main[data-ready="episode"]', { timeout: 60_000 });
  await shoot(page, path.join(out, 'ui-episode.png'), maxHeight);
  await page.goto(`${ui.url}#/step?run=${encodeURIComponent(runId)}&step=${step}&group=${prompt}`);
  await page.waitForSelector('main[data-ready="step"] .groups.focused', { timeout: 60_000 });
  await shoot(page, path.join(out, 'ui-group.png'), maxHeight);
  await page.goto(`${ui.url}#/run?id=${encodeURIComponent(runId)}`);
  await page.waitForSelector('main[data-ready="run"]', { timeout: 60_000 });
  await shoot(page, path.join(out, 'ui-run.png'), maxHeight);
  if (values.compare.length) {
    await page.goto(`${ui.url}#/`);
    await page.waitForSelector('main[data-ready="runs"]', { timeout: 60_000 });
    await shoot(page, path.join(out, 'ui-runs.png'), maxHeight);
    const runs = [runId, ...values.compare].map(encodeURIComponent).join(',');
    await page.goto(`${ui.url}#/compare?runs=${runs}`);
    await page.waitForSelector('main[data-ready="compare"]', { timeout: 60_000 });
    await shoot(page, path.join(out, 'ui-compare.png'), maxHeight);
  }
  process.stdout.write(`episode ${episode}\n`);
} finally {
  await browser.close();
  await ui.close();
  closeBlobStore(store);
  await releaseLookups(cfg, temporal);
}
