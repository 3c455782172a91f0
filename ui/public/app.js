// The page's router: the hash names the view (#/, #/run?id=R, #/step?run=R&step=N, #/search?run=R&…,
// #/episode?id=E); each view renders into <main> and may return a function that stops its polling.
// When a view has rendered, <main data-ready> names it (tests and the bench wait on it).
import { fill, h } from './dom.js';
import { renderEpisode } from './views/episode.js';
import { renderRun } from './views/run.js';
import { renderRuns } from './views/runs.js';
import { renderSearch } from './views/search.js';
import { renderStep } from './views/step.js';

const views = { '': renderRuns, run: renderRun, step: renderStep, search: renderSearch, episode: renderEpisode };

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

window.addEventListener('hashchange', show);
show();
