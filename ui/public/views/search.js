// Search and filter a run's episodes by step, status, outcome, reward, turns, answer and text, a page
// at a time; the filter lives in the address, so a search can be linked and goes back and forth. A
// value the server refuses is reported under the form, which keeps what was typed.
import { api, apiPath, badge, fill, h, link, num, route } from '../dom.js';
import { dataTable } from '../tables.js';
import { setCrumbs } from './common.js';

const FILTERS = ['step', 'status', 'outcome', 'reward_min', 'reward_max', 'turns', 'answer', 'text'];
const PAGE = 50;

function field(name, label, params, input) {
  const el = input ?? h('input', { name, size: 8 });
  el.value = params[name] ?? '';
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

const RESULT_COLUMNS = [
  {
    key: 'episode_id',
    label: 'episode',
    value: (r) => r.episode_id,
    cell: (r) => link(r.episode_id, 'episode', { id: r.episode_id }, { class: 'episode-link' }),
  },
  { key: 'reward', label: 'reward', value: (r) => r.reward, cell: (r) => num(r.reward), class: 'n', descFirst: true },
  { key: 'advantage', label: 'advantage', value: (r) => r.advantage, cell: (r) => num(r.advantage), class: 'n' },
  { key: 'status', label: 'status', value: (r) => r.status, cell: (r) => badge(r.status) },
  { key: 'outcome', label: 'outcome', value: (r) => r.outcome },
  { key: 'turns', label: 'turns', value: (r) => r.turns, class: 'n' },
  { key: 'response_len', label: 'tokens', value: (r) => r.response_len, class: 'n' },
  {
    key: 'answers',
    label: 'answers',
    value: (r) => r.answers.map((a) => a ?? '·').join(', '),
    cell: (r) => r.answers.map((a) => a ?? '·').join(', ') || '-',
    class: 'answer',
  },
  { key: 'label', label: 'label', value: (r) => r.label },
  { key: 'excerpt', label: 'text', value: (r) => r.excerpt, cell: (r) => h('pre', {}, r.excerpt), class: 'excerpt' },
];

export async function renderSearch(main, params, { signal, crumbs }) {
  const runId = params.run ?? '';
  setCrumbs(crumbs, [[runId, 'run', { id: runId }], ['search']]);
  const offset = Number(params.offset ?? 0) || 0;
  const query = { limit: PAGE, offset };
  for (const name of FILTERS) if (params[name]) query[name] = params[name];
  const results = h('div', { class: 'search-results' });
  fill(main, h('h1', {}, `Search ${runId}`), form(runId, params), results);
  let result;
  try {
    result = await api(apiPath(`runs/${encodeURIComponent(runId)}/episodes`, query), signal);
  } catch (err) {
    if (signal.aborted) throw err;
    // the form stays as typed: the value refused can be corrected
    fill(results, h('p', { class: 'error', role: 'alert' }, String(err.message ?? err)));
    return;
  }
  const pageLink = (text, at) => link(text, 'search', { ...params, offset: at });
  fill(
    results,
    h(
      'p',
      { class: 'nav' },
      `${result.total} episode(s) in ${result.steps_searched} step(s)`,
      result.total ? ` · ${offset + 1}–${Math.min(offset + PAGE, result.total)}` : '',
      offset > 0 ? [' · ', pageLink('← previous', Math.max(0, offset - PAGE))] : null,
      offset + PAGE < result.total ? [' · ', pageLink('next →', offset + PAGE)] : null,
    ),
    dataTable({
      name: `${runId}-episodes`,
      columns: RESULT_COLUMNS,
      rows: result.rows,
      rowAttrs: (r) => ({ dataset: { episode: r.episode_id } }),
      attrs: { class: 'results' },
    }),
  );
}
