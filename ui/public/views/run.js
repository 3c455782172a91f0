// A run: its progress (updated every 2 s without reload), what it learnt (the held-out eval before →
// after with its delta, then the summary the report gives), its metrics per step as interactive plots
// (the eval's from before training), the time per phase, a reward histogram per step, its steps.
import { api, apiPath, badge, fill, h, link, num, when } from '../dom.js';
import { histogram, histogramBars, metricPlot } from '../plots.js';
import { dataTable } from '../tables.js';
import { poll, setCrumbs } from './common.js';
import { signed } from './runs.js';

export const DEFAULT_PLOTS = [
  'eval/reward',
  'rollout/raw_reward',
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

/** The held-out eval of each metric: before training, after the last eval, and the difference. */
export function evalRows(steps) {
  const before = steps.find((s) => Object.keys(s.metrics).some((k) => k.startsWith('eval_start/')))?.metrics ?? {};
  const after = [...steps].reverse().find((s) => Object.keys(s.metrics).some((k) => k.startsWith('eval/')));
  const names = new Set([
    ...Object.keys(before)
      .filter((k) => k.startsWith('eval_start/'))
      .map((k) => k.slice('eval_start/'.length)),
    ...Object.keys(after?.metrics ?? {})
      .filter((k) => k.startsWith('eval/'))
      .map((k) => k.slice('eval/'.length)),
  ]);
  // the reward first: the headline
  return [...names]
    .sort((a, b) => (a === 'reward' ? -1 : b === 'reward' ? 1 : a.localeCompare(b)))
    .map((metric) => {
      const b = before[`eval_start/${metric}`] ?? null;
      const a = after?.metrics[`eval/${metric}`] ?? null;
      return {
        metric,
        before: b,
        after: a,
        after_step: after?.step ?? null,
        delta: a !== null && b !== null ? a - b : null,
      };
    });
}

/** The headline: the held-out eval reward before → after and its delta; then the summary's lines. */
function learnt(run, steps, summary) {
  const reward = evalRows(steps).find((r) => r.metric === 'reward');
  const head = reward
    ? h(
        'p',
        { class: 'headline', dataset: { field: 'eval-headline' } },
        'held-out eval reward ',
        h('strong', {}, num(reward.before)),
        ' before → ',
        h('strong', {}, num(reward.after)),
        reward.after_step !== null ? ` after step ${reward.after_step} ` : ' after ',
        h(
          'span',
          { class: `delta ${reward.delta > 0 ? 'up' : reward.delta < 0 ? 'down' : ''}` },
          `(${signed(reward.delta)})`,
        ),
      )
    : h('p', { class: 'muted' }, `No held-out eval in ${run.run_id} (run.eval_at_start, run.eval_interval).`);
  // the summary's first line is the same headline in words
  const rest = summary.slice(reward ? 1 : 0);
  return [
    head,
    rest.length
      ? h(
          'ul',
          { class: 'summary-lines' },
          rest.map((l) => h('li', {}, l)),
        )
      : null,
  ];
}

function evalTable(steps) {
  const rows = evalRows(steps);
  if (!rows.length) return h('p', { class: 'muted' }, 'No held-out eval in this run.');
  const after = rows[0].after_step;
  return dataTable({
    name: 'eval',
    columns: [
      { key: 'metric', label: 'metric', value: (r) => r.metric },
      { key: 'before', label: 'before training', value: (r) => r.before, cell: (r) => num(r.before), class: 'n' },
      {
        key: 'after',
        label: after !== null ? `after step ${after}` : 'after',
        value: (r) => r.after,
        cell: (r) => num(r.after),
        class: 'n',
      },
      { key: 'delta', label: 'Δ', value: (r) => r.delta, cell: (r) => signed(r.delta), class: 'n' },
    ],
    rows,
    attrs: { class: 'eval' },
  });
}

function stepsTable(runId, steps, sort) {
  const m = (k, digits) => ({ value: (s) => s.metrics[k] ?? null, cell: (s) => num(s.metrics[k], digits), class: 'n' });
  return dataTable({
    name: `${runId}-steps`,
    columns: [
      {
        key: 'step',
        label: 'step',
        value: (s) => s.step,
        cell: (s) => link(`step ${s.step}`, 'step', { run: runId, step: s.step }, { class: 'step-link' }),
      },
      { key: 'weight_version', label: 'weights', value: (s) => s.weight_version, class: 'n' },
      { key: 'reward', label: 'reward', ...m('rollout/raw_reward') },
      { key: 'eval_reward', label: 'eval reward', ...m('eval/reward') },
      { key: 'episodes', label: 'episodes', value: (s) => s.episodes, class: 'n' },
      { key: 'trained', label: 'trained', value: (s) => s.trained, class: 'n' },
      { key: 'logprob_diff', label: 'train/rollout |Δ logprob|', ...m('train/train_rollout_logprob_abs_diff', 4) },
      { key: 'step_time', label: 'step time (s)', ...m('perf/step_time', 2) },
    ],
    rows: [...steps].reverse(),
    attrs: { class: 'steps' },
    sort,
  });
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

export function plotTitle(key) {
  return key.startsWith('eval/') ? `${key} (held-out; step −1: before training)` : key;
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
    if (picker.value) add(grid, plotTitle(picker.value), [picker.value], latest, width);
    picker.value = '';
  });
  const build = (steps) => {
    plots.forEach((p) => p.destroy());
    plots = [];
    const keys = metricKeys(steps);
    fill(grid);
    fill(timeGrid);
    // an eval/* plot also where only the eval before training is recorded yet
    const has = (k) => keys.includes(k) || (k.startsWith('eval/') && keys.includes(`eval_start/${k.slice(5)}`));
    for (const k of DEFAULT_PLOTS) if (has(k)) add(grid, plotTitle(k), [k], steps, width);
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
  const learntBox = h('section', { class: 'learnt' }, learnt(data.run, data.steps, data.summary));
  const evalBox = h('section', {}, h('h2', {}, 'Held-out eval'), evalTable(data.steps));
  const stepSort = {};
  // two plots a row: half the page less the figure's border, padding and the gap
  const width = Math.max(320, Math.floor(((main.getBoundingClientRect().width || 1000) - 40) / 2) - 24);
  const plots = plotsSection(data.step_time_keys, width);
  const hist = histogramSection(runId, signal);
  const stepsBox = h('section', {}, h('h2', {}, 'Steps'), stepsTable(runId, data.steps, stepSort));
  const status = h('p', { class: 'status' });
  fill(main, head, learntBox, ...plots.els, evalBox, hist.el, stepsBox, status);
  plots.update(data.steps);
  await hist.update(data.steps);
  const stop = poll(
    2000,
    async () => {
      const next = await api(path, signal);
      fill(head, header(next.run));
      if (next.steps.length !== data.steps.length) {
        plots.update(next.steps);
        fill(learntBox, learnt(next.run, next.steps, next.summary));
        fill(evalBox, h('h2', {}, 'Held-out eval'), evalTable(next.steps));
        fill(stepsBox, h('h2', {}, 'Steps'), stepsTable(runId, next.steps, stepSort));
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
