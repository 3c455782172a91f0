// Search and filter a run's episodes by step, status, outcome, reward, turns, answer and text, a page
// at a time; the filter lives in the address, so a search can be linked and goes back and forth.
import { api, apiPath, badge, fill, h, link, num, route, table } from '../dom.js';
import { setCrumbs } from './common.js';

const FILTERS = ['step', 'status', 'outcome', 'reward_min', 'reward_max', 'turns', 'answer', 'text'];
const PAGE = 50;

function field(name, label, params, input) {
  const el = input ?? h('input', { name, value: params[name] ?? '', size: 8 });
  if (input) el.value = params[name] ?? '';
  return h('label', {}, label, ' ', el);
}

function choice(name, values) {
  return h(
    'select',
    { name },
    h('option', { value: '' }, 'any'),
    values.map((v) => h('option', { value: v }, v)),
  );
}

function form(runId, params) {
  const f = h(
    'form',
    { class: 'search', role: 'search' },
    field('step', 'step', params),
    field('status', 'status', params, choice('status', ['COMPLETED', 'TRUNCATED', 'ABORTED', 'FAILED'])),
    field('outcome', 'outcome', params, choice('outcome', ['trained', 'filtered', 'failed'])),
    field('reward_min', 'reward ≥', params),
    field('reward_max', 'reward ≤', params),
    field('turns', 'turns', params),
    field('answer', 'answer', params),
    field('text', 'text', params, h('input', { name: 'text', size: 24 })),
    h('button', { type: 'submit' }, 'search'),
  );
  f.addEventListener('submit', (e) => {
    e.preventDefault();
    const values = { run: runId };
    for (const name of FILTERS) values[name] = f.elements[name].value.trim();
    location.hash = route('search', values);
  });
  return f;
}

function resultRow(r) {
  return h(
    'tr',
    { dataset: { episode: r.episode_id } },
    h('td', {}, link(r.episode_id, 'episode', { id: r.episode_id }, { class: 'episode-link' })),
    h('td', { class: 'n' }, num(r.reward)),
    h('td', {}, badge(r.status)),
    h('td', {}, r.outcome),
    h('td', { class: 'n' }, r.turns ?? '-'),
    h('td', { class: 'answer' }, r.answers.map((a) => a ?? '·').join(', ') || '-'),
    h('td', { class: 'excerpt' }, h('pre', {}, r.excerpt)),
  );
}

export async function renderSearch(main, params, { signal, crumbs }) {
  const runId = params.run ?? '';
  setCrumbs(crumbs, [[runId, 'run', { id: runId }], ['search']]);
  const offset = Number(params.offset ?? 0) || 0;
  const query = { limit: PAGE, offset };
  for (const name of FILTERS) if (params[name]) query[name] = params[name];
  const result = await api(apiPath(`runs/${encodeURIComponent(runId)}/episodes`, query), signal);
  const pageLink = (text, at) => link(text, 'search', { ...params, offset: at });
  const pager = h(
    'p',
    { class: 'nav' },
    `${result.total} episode(s) in ${result.steps_searched} step(s)`,
    result.total ? ` · ${offset + 1}–${Math.min(offset + PAGE, result.total)}` : '',
    offset > 0 ? [' · ', pageLink('← previous', Math.max(0, offset - PAGE))] : null,
    offset + PAGE < result.total ? [' · ', pageLink('next →', offset + PAGE)] : null,
  );
  fill(
    main,
    h('h1', {}, `Search ${runId}`),
    form(runId, params),
    pager,
    table(['episode', 'reward', 'status', 'outcome', 'turns', 'answers', 'text'], result.rows.map(resultRow), {
      class: 'results',
    }),
  );
}
