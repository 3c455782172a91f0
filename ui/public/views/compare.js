// Two to four runs compared: their held-out eval before → after side by side, and each metric's
// plot with one line per run (the eval's from before training).
import { api, apiPath, fill, h, link, num } from '../dom.js';
import { comparePlot } from '../plots.js';
import { dataTable } from '../tables.js';
import { setCrumbs } from './common.js';
import { DEFAULT_PLOTS, evalRows, plotTitle } from './run.js';
import { COMPARE_MAX, signed } from './runs.js';

function evalTable(details) {
  const per = details.map((d) => new Map(evalRows(d.steps).map((r) => [r.metric, r])));
  const metrics = [...new Set(per.flatMap((m) => [...m.keys()]))].sort((a, b) =>
    a === 'reward' ? -1 : b === 'reward' ? 1 : a.localeCompare(b),
  );
  if (!metrics.length) return h('p', { class: 'muted' }, 'None of these runs has a held-out eval.');
  const columns = [{ key: 'metric', label: 'metric', value: (m) => m }];
  details.forEach((d, i) => {
    const at = (m) => per[i].get(m) ?? {};
    const id = d.run.run_id;
    columns.push(
      {
        key: `${id}:before`,
        label: `${id} before`,
        value: (m) => at(m).before ?? null,
        cell: (m) => num(at(m).before),
        class: 'n',
      },
      {
        key: `${id}:after`,
        label: `${id} after`,
        value: (m) => at(m).after ?? null,
        cell: (m) => num(at(m).after),
        class: 'n',
      },
      {
        key: `${id}:delta`,
        label: `${id} Δ`,
        value: (m) => at(m).delta ?? null,
        cell: (m) => signed(at(m).delta),
        class: 'n',
      },
    );
  });
  return dataTable({ name: 'compare-eval', columns, rows: metrics, attrs: { class: 'eval compare' } });
}

export async function renderCompare(main, params, { signal, crumbs }) {
  const ids = [...new Set((params.runs ?? '').split(',').filter(Boolean))];
  setCrumbs(crumbs, [[`compare ${ids.join(', ')}`]]);
  if (ids.length < 2 || ids.length > COMPARE_MAX)
    throw new Error(
      `compare takes 2 to ${COMPARE_MAX} runs (runs=A,B,…), got ${ids.length}: tick them on the runs page`,
    );
  const details = await Promise.all(ids.map((id) => api(apiPath(`runs/${encodeURIComponent(id)}`), signal)));
  const keys = new Set(details.flatMap((d) => d.steps.flatMap((s) => Object.keys(s.metrics))));
  const has = (k) => keys.has(k) || (k.startsWith('eval/') && keys.has(`eval_start/${k.slice(5)}`));
  const width = Math.max(320, Math.floor(((main.getBoundingClientRect().width || 1000) - 40) / 2) - 24);
  const plots = DEFAULT_PLOTS.filter(has).map((k) =>
    comparePlot(
      k,
      plotTitle(k),
      details.map((d) => ({ run_id: d.run.run_id, steps: d.steps })),
      width,
    ),
  );
  fill(
    main,
    h('h1', {}, `Compare ${ids.length} runs`),
    h(
      'p',
      { class: 'nav' },
      details.map((d, i) => [
        i ? ' · ' : '',
        link(d.run.run_id, 'run', { id: d.run.run_id }),
        ` (${d.steps.length} steps)`,
      ]),
    ),
    h('section', {}, h('h2', {}, 'Held-out eval'), evalTable(details)),
    h(
      'section',
      {},
      h('h2', {}, 'Metrics per step'),
      h('p', { class: 'hint' }, 'One line per run; hover for values, drag to zoom, double-click to zoom out.'),
      h(
        'div',
        { class: 'plots' },
        plots.map((p) => p.el),
      ),
    ),
  );
  return () => plots.forEach((p) => p.destroy());
}
