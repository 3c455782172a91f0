// The runs of the state dir: status, progress, algorithm, times; updated every 2 s without reload.
import { api, badge, fill, h, link, num, table, when } from '../dom.js';
import { poll, setCrumbs } from './common.js';

function progress(r) {
  const steps = `${r.step}${r.steps_total !== null ? ` / ${r.steps_total}` : ''}`;
  if (!r.phase) return steps;
  const eps = r.episodes_total ? ` ${r.episodes_done}/${r.episodes_total}` : '';
  return `${steps} · ${r.phase}${eps}`;
}

function runRow(r) {
  return h(
    'tr',
    { dataset: { run: r.run_id } },
    h('td', {}, link(r.run_id, 'run', { id: r.run_id }, { class: 'run-link' })),
    h('td', {}, badge(r.status)),
    h('td', { class: 'progress' }, progress(r)),
    h('td', {}, r.algorithm ?? '-'),
    h('td', {}, when(r.started)),
    h('td', {}, r.workflow_status === 'RUNNING' ? 'running' : when(r.ended ?? r.last_recorded)),
    h('td', { class: 'n' }, num(r.last_reward)),
  );
}

export async function renderRuns(main, _params, { signal, crumbs }) {
  setCrumbs(crumbs, []);
  const note = h('p', { class: 'muted' });
  const body = h('div');
  const status = h('p', { class: 'status' });
  const draw = async () => {
    const data = await api('/api/runs', signal);
    fill(
      note,
      data.temporal
        ? 'Status and progress from the runs’ workflows; metrics from their step records.'
        : 'No Temporal server answers: status from the step records only.',
    );
    fill(
      body,
      data.runs.length === 0
        ? h('p', { class: 'muted' }, 'No runs in this state directory yet.')
        : table(
            ['run', 'status', 'step · phase', 'algorithm', 'started', 'ended', 'last reward'],
            data.runs.map(runRow),
            { class: 'runs' },
          ),
    );
  };
  await draw();
  fill(main, h('h1', {}, 'Runs'), note, body, status);
  return poll(2000, draw, signal, status);
}
