// The runs of the state dir: status, progress, algorithm, times, the last reward and the held-out eval
// before → after; updated every 2 s without reload. Two to four runs ticked are compared.
import { api, badge, fill, h, link, num, route, when } from '../dom.js';
import { dataTable } from '../tables.js';
import { poll, setCrumbs } from './common.js';

export const COMPARE_MAX = 4;

function progress(r) {
  const steps = `${r.step}${r.steps_total !== null ? ` / ${r.steps_total}` : ''}`;
  if (!r.phase) return steps;
  const eps = r.episodes_total ? ` ${r.episodes_done}/${r.episodes_total}` : '';
  return `${steps} · ${r.phase}${eps}`;
}

const delta = (r) => (r.eval_before !== null && r.eval_after !== null ? r.eval_after - r.eval_before : null);

/** A signed number: +0.590, −0.100. */
export function signed(v) {
  return v === null || v === undefined ? '-' : `${v > 0 ? '+' : v < 0 ? '−' : '±'}${num(Math.abs(v))}`;
}

function columns(picked, onPick) {
  return [
    {
      key: 'compare',
      label: 'compare',
      value: (r) => (picked.has(r.run_id) ? 1 : 0),
      cell: (r) => {
        const box = h('input', {
          type: 'checkbox',
          class: 'pick',
          'aria-label': `compare ${r.run_id}`,
          checked: picked.has(r.run_id),
        });
        box.addEventListener('change', () => onPick(r.run_id, box.checked));
        return box;
      },
    },
    {
      key: 'run_id',
      label: 'run',
      value: (r) => r.run_id,
      cell: (r) => link(r.run_id, 'run', { id: r.run_id }, { class: 'run-link' }),
    },
    { key: 'status', label: 'status', value: (r) => r.status, cell: (r) => badge(r.status) },
    { key: 'step', label: 'step · phase', value: (r) => r.step, cell: progress, class: 'progress' },
    { key: 'algorithm', label: 'algorithm', value: (r) => r.algorithm },
    { key: 'started', label: 'started', value: (r) => r.started, cell: (r) => when(r.started) },
    {
      key: 'ended',
      label: 'ended',
      value: (r) => r.ended ?? r.last_recorded,
      cell: (r) => (r.workflow_status === 'RUNNING' ? 'running' : when(r.ended ?? r.last_recorded)),
    },
    {
      key: 'last_reward',
      label: 'last reward',
      value: (r) => r.last_reward,
      cell: (r) => num(r.last_reward),
      class: 'n',
      descFirst: true,
    },
    {
      key: 'eval_before',
      label: 'eval before',
      value: (r) => r.eval_before,
      cell: (r) => num(r.eval_before),
      class: 'n',
      descFirst: true,
    },
    {
      key: 'eval_after',
      label: 'eval after',
      value: (r) => r.eval_after,
      cell: (r) => num(r.eval_after),
      class: 'n',
      descFirst: true,
    },
    {
      key: 'eval_delta',
      label: 'eval Δ',
      value: delta,
      cell: (r) => signed(delta(r)),
      class: 'n eval-delta',
      descFirst: true,
    },
  ];
}

export async function renderRuns(main, _params, { signal, crumbs }) {
  setCrumbs(crumbs, []);
  const note = h('p', { class: 'muted' });
  const body = h('div');
  const status = h('p', { class: 'status' });
  const picked = new Set();
  const compare = h('button', { type: 'button', class: 'compare', disabled: true }, 'compare the ticked runs');
  const hint = h('span', { class: 'hint' }, ` tick 2 to ${COMPARE_MAX} runs`);
  const onPick = (id, on) => {
    if (on) picked.add(id);
    else picked.delete(id);
    compare.disabled = picked.size < 2 || picked.size > COMPARE_MAX;
    fill(hint, ` ${picked.size} ticked (2 to ${COMPARE_MAX})`);
  };
  compare.addEventListener('click', () => {
    location.hash = route('compare', { runs: [...picked].join(',') });
  });
  let signature = null;
  const sort = {};
  const draw = async () => {
    const data = await api('/api/runs', signal);
    fill(
      note,
      data.temporal
        ? 'Status and progress from the runs’ workflows; metrics from their step records.'
        : 'No Temporal server answers: status from the step records only.',
    );
    // redrawn only when something changed: a sort or a tick is kept between polls
    const sig = JSON.stringify(data.runs);
    if (sig === signature) return;
    signature = sig;
    fill(
      body,
      data.runs.length === 0
        ? h('p', { class: 'muted' }, 'No runs in this state directory yet.')
        : dataTable({
            name: 'runs',
            columns: columns(picked, onPick),
            rows: data.runs,
            rowAttrs: (r) => ({ dataset: { run: r.run_id } }),
            attrs: { class: 'runs' },
            sort,
          }),
    );
  };
  await draw();
  fill(main, h('h1', {}, 'Runs'), note, h('p', { class: 'nav' }, compare, hint), body, status);
  return poll(2000, draw, signal, status);
}
