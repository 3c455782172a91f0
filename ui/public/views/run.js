// A run: its progress (updated every 2 s without reload), the held-out eval before and after, its
// metrics per step as interactive plots, the time per phase, a reward histogram per step, its steps.
import { api, apiPath, badge, fill, h, link, num, table, when } from '../dom.js';
import { histogram, histogramBars, metricPlot } from '../plots.js';
import { poll, setCrumbs } from './common.js';

const DEFAULT_PLOTS = [
  'rollout/raw_reward',
  'eval/reward',
  'rollout/first_answer_correct',
  'rollout/tool_call_rate',
  'rollout/response_len',
  'rollout/truncated_ratio',
  'train/pg_loss',
  'train/train_rollout_logprob_abs_diff',
  'sft/nll',
];

function stepText(run) {
  return `step ${run.step}${run.steps_total !== null ? ` / ${run.steps_total}` : ''}`;
}

function header(run) {
  const phase = run.phase
    ? ` · ${run.phase}${run.episodes_total ? ` ${run.episodes_done}/${run.episodes_total} episodes` : ''}`
    : '';
  return [
    h(
      'h1',
      {},
      run.run_id,
      ' ',
      badge(run.status),
      ' ',
      h('span', { id: 'run-step', class: 'step-counter' }, stepText(run)),
      h('span', { class: 'muted' }, phase),
    ),
    h(
      'p',
      { class: 'meta' },
      `${run.algorithm ?? 'algorithm unknown'} · started ${when(run.started)} · ${run.workflow_status === 'RUNNING' ? 'running' : `ended ${when(run.ended ?? run.last_recorded)}`} · `,
      link('search its episodes', 'search', { run: run.run_id }),
      run.history_url
        ? [' · ', h('a', { href: run.history_url, target: '_blank', rel: 'noopener noreferrer' }, 'workflow history')]
        : null,
    ),
  ];
}

function evalTable(steps) {
  const before = steps[0]?.metrics ?? {};
  const after = [...steps].reverse().find((s) => Object.keys(s.metrics).some((k) => k.startsWith('eval/')));
  const names = new Set([
    ...Object.keys(before)
      .filter((k) => k.startsWith('eval_start/'))
      .map((k) => k.slice('eval_start/'.length)),
    ...Object.keys(after?.metrics ?? {})
      .filter((k) => k.startsWith('eval/'))
      .map((k) => k.slice('eval/'.length)),
  ]);
  if (names.size === 0) return h('p', { class: 'muted' }, 'No held-out eval in this run.');
  return table(
    ['metric', 'before training', after ? `after step ${after.step}` : 'after'],
    [...names]
      .sort()
      .map((n) =>
        h(
          'tr',
          {},
          h('td', {}, n),
          h('td', { class: 'n' }, num(before[`eval_start/${n}`])),
          h('td', { class: 'n' }, num(after?.metrics[`eval/${n}`])),
        ),
      ),
    { class: 'eval' },
  );
}

function stepsTable(runId, steps) {
  return table(
    ['step', 'weights', 'reward', 'episodes', 'trained', 'step time (s)'],
    [...steps]
      .reverse()
      .map((s) =>
        h(
          'tr',
          {},
          h('td', {}, link(`step ${s.step}`, 'step', { run: runId, step: s.step }, { class: 'step-link' })),
          h('td', { class: 'n' }, s.weight_version),
          h('td', { class: 'n' }, num(s.metrics['rollout/raw_reward'])),
          h('td', { class: 'n' }, s.episodes),
          h('td', { class: 'n' }, s.trained),
          h('td', { class: 'n' }, num(s.metrics['perf/step_time'], 2)),
        ),
      ),
    { class: 'steps' },
  );
}

/** The reward histogram of one step (its episodes' rewards), with a step picker. */
function histogramSection(runId, signal) {
  const picker = h('select', { 'aria-label': 'step' });
  const bars = h('div');
  let followLatest = true;
  const draw = async () => {
    if (!picker.value) return fill(bars, h('p', { class: 'muted' }, 'No step recorded yet.'));
    const view = await api(apiPath(`runs/${encodeURIComponent(runId)}/steps/${picker.value}`), signal);
    const rewards = view.groups.flatMap((g) => g.rows.map((r) => r.reward)).filter((r) => r !== null);
    fill(
      bars,
      rewards.length ? histogramBars(histogram(rewards)) : h('p', { class: 'muted' }, 'No rewards in this step.'),
    );
  };
  picker.addEventListener('change', () => {
    followLatest = picker.selectedIndex === 0;
    draw().catch((err) => fill(bars, h('p', { class: 'error' }, err.message)));
  });
  return {
    el: h('section', {}, h('h2', {}, 'Reward histogram of step ', picker), bars),
    async update(steps) {
      const chosen = picker.value;
      if (picker.options.length === steps.length) return;
      fill(
        picker,
        [...steps].reverse().map((s) => h('option', { value: s.step }, s.step)),
      );
      picker.value = followLatest || !chosen ? String(steps.at(-1)?.step ?? '') : chosen;
      await draw();
    },
  };
}

function metricKeys(steps) {
  return [...new Set(steps.flatMap((s) => Object.keys(s.metrics)))].sort();
}

/** The metric plots and the phase-time plot; rebuilt when new metric names appear, else updated. */
function plotsSection(stepTimeKeys, width) {
  let plots = [];
  let signature = null;
  const grid = h('div', { class: 'plots' });
  const timeGrid = h('div', { class: 'plots' });
  const picker = h('select', { 'aria-label': 'add a plot' });
  const add = (target, title, keys, steps, w) => {
    const p = metricPlot(title, keys, steps, w);
    plots.push(p);
    target.append(p.el);
  };
  let latest = [];
  picker.addEventListener('change', () => {
    if (picker.value) add(grid, picker.value, [picker.value], latest, width);
    picker.value = '';
  });
  const build = (steps) => {
    plots.forEach((p) => p.destroy());
    plots = [];
    const keys = metricKeys(steps);
    fill(grid);
    fill(timeGrid);
    for (const k of DEFAULT_PLOTS) if (keys.includes(k)) add(grid, k, [k], steps, width);
    const phases = stepTimeKeys.filter((k) => keys.includes(k));
    if (phases.length) add(timeGrid, 'seconds per phase', phases, steps, width * 2);
    else timeGrid.append(h('p', { class: 'muted' }, 'No phase times recorded yet.'));
    if (!keys.length) grid.append(h('p', { class: 'muted' }, 'No step recorded yet.'));
    fill(
      picker,
      h('option', { value: '' }, 'add a plot…'),
      keys.map((k) => h('option', { value: k }, k)),
    );
  };
  return {
    els: [
      h(
        'section',
        {},
        h('h2', {}, 'Metrics per step ', picker),
        h('p', { class: 'hint' }, 'Hover for values; drag across a plot to zoom into steps, double-click to zoom out.'),
        grid,
      ),
      h('section', {}, h('h2', {}, 'Time per phase'), timeGrid),
    ],
    update(steps) {
      latest = steps;
      const sig = metricKeys(steps).join(' ');
      if (sig !== signature) {
        signature = sig;
        build(steps);
      } else plots.forEach((p) => p.update(steps));
    },
    destroy: () => plots.forEach((p) => p.destroy()),
  };
}

export async function renderRun(main, params, { signal, crumbs }) {
  const runId = params.id ?? '';
  setCrumbs(crumbs, [[runId]]);
  const path = apiPath(`runs/${encodeURIComponent(runId)}`);
  let data = await api(path, signal);
  const head = h('div', {}, header(data.run));
  const evalBox = h('section', {}, h('h2', {}, 'Held-out eval'), evalTable(data.steps));
  // two plots a row: half the page less the figure's border, padding and the gap
  const width = Math.max(320, Math.floor(((main.getBoundingClientRect().width || 1000) - 40) / 2) - 24);
  const plots = plotsSection(data.step_time_keys, width);
  const hist = histogramSection(runId, signal);
  const stepsBox = h('section', {}, h('h2', {}, 'Steps'), stepsTable(runId, data.steps));
  const status = h('p', { class: 'status' });
  fill(main, head, evalBox, ...plots.els, hist.el, stepsBox, status);
  plots.update(data.steps);
  await hist.update(data.steps);
  const stop = poll(
    2000,
    async () => {
      const next = await api(path, signal);
      fill(head, header(next.run));
      if (next.steps.length !== data.steps.length) {
        plots.update(next.steps);
        fill(evalBox, h('h2', {}, 'Held-out eval'), evalTable(next.steps));
        fill(stepsBox, h('h2', {}, 'Steps'), stepsTable(runId, next.steps));
        await hist.update(next.steps);
      }
      data = next;
    },
    signal,
    status,
  );
  return () => {
    stop();
    plots.destroy();
  };
}
