// The page's router: the hash names the view (#/, #/run?id=R, #/compare?runs=A,B, #/step?run=R&step=N,
// #/step?run=R&step=N&group=P, #/search?run=R&…, #/episode?id=E); each view renders into <main> and
// may return a function that stops its polling. When a view has rendered, <main data-ready> names it
// (tests and the bench wait on it). Above every view, the banners: a --host beyond loopback, and a
// Temporal server that does not answer (each API answer says its state).
import { api, fill, h, onTemporalState } from './dom.js';
import { renderCompare } from './views/compare.js';
import { renderEpisode } from './views/episode.js';
import { renderRun } from './views/run.js';
import { renderRuns } from './views/runs.js';
import { renderSearch } from './views/search.js';
import { renderStep } from './views/step.js';

const views = {
  '': renderRuns,
  run: renderRun,
  compare: renderCompare,
  step: renderStep,
  search: renderSearch,
  episode: renderEpisode,
};

const main = document.getElementById('view');
const crumbs = document.getElementById('crumbs');
let stop = null;
let current = null;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query = ''] = raw.split('?', 2);
  return { name: path, params: Object.fromEntries(new URLSearchParams(query)) };
}

async function show() {
  stop?.();
  stop = null;
  current?.abort();
  const controller = new AbortController();
  current = controller;
  const { name, params } = parseHash();
  const view = views[name];
  delete main.dataset.ready;
  fill(crumbs);
  if (!view) {
    fill(main, h('p', { class: 'error' }, `no page ${name}`));
    return;
  }
  try {
    const stopper = await view(main, params, { signal: controller.signal, crumbs });
    if (controller.signal.aborted) return stopper?.();
    stop = stopper ?? null;
    main.dataset.ready = name || 'runs';
  } catch (err) {
    if (controller.signal.aborted) return;
    fill(main, h('p', { class: 'error', role: 'alert' }, String(err.message ?? err)));
    main.dataset.ready = 'error';
  }
}

const banners = document.getElementById('banners');
const remoteBanner = h('p', { class: 'banner banner-remote', role: 'alert', hidden: true });
const temporalBanner = h('p', { class: 'banner banner-temporal', role: 'status', hidden: true });
banners.append(remoteBanner, temporalBanner);
let temporalState = null;

function drawStatus({ temporal, served }) {
  remoteBanner.hidden = !served.remote;
  if (served.remote)
    fill(
      remoteBanner,
      `This page is served on ${served.host} (tempo-rl ui --allow-remote) to whoever can reach that address: `,
      'it has no authentication, and every run of this state directory can be read here.',
    );
  temporalState = temporal.state;
  temporalBanner.hidden = temporal.state !== 'down';
  if (temporal.state === 'down')
    fill(
      temporalBanner,
      h('strong', {}, 'The Temporal server does not answer'),
      ` (${temporal.address ?? 'its address'}${temporal.error ? `: ${temporal.error}` : ''}; since ${new Date(temporal.since).toLocaleTimeString()}). `,
      'Runs show what their step records hold and episodes their samples, without the histories; ',
      'the server is asked again every few seconds.',
    );
}

async function refreshStatus() {
  try {
    drawStatus(await api('/api/status'));
  } catch {
    // the next answer's header tries again
  }
}

// an answer whose state differs from the banner's: the banner asks for the details
onTemporalState((state) => {
  if (state !== temporalState) {
    temporalState = state;
    refreshStatus();
  }
});

window.addEventListener('hashchange', show);
refreshStatus();
show();
