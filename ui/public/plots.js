// Interactive plots (uPlot): hover shows each series' value at the step under the cursor, dragging
// across the plot zooms into those steps, a double click zooms out.
import uPlot from '/vendor/uPlot.esm.js';
import { h } from './dom.js';

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4d7c0f', '#be185d'];

/** Tick labels with as many decimals as the ticks' spacing needs (uPlot's default keeps three, so a
 *  metric of 1e-4 read "0" at every tick); very small or large values in exponent form. */
export function tickLabels(splits, incr) {
  const step = Math.abs(incr) || Math.abs(splits[1] - splits[0]) || 1;
  const big = Math.max(...splits.map((v) => Math.abs(v ?? 0)));
  if (big >= 1e6 || (big > 0 && big < 1e-4))
    return splits.map((v) =>
      v === null || v === undefined
        ? ''
        : v === 0
          ? '0'
          : v.toExponential(Math.max(0, Math.min(3, Math.ceil(Math.log10(big / step))))),
    );
  const decimals = Math.max(0, Math.min(8, -Math.floor(Math.log10(step) + 1e-9)));
  return splits.map((v) => (v === null || v === undefined ? '' : v.toFixed(decimals)));
}

function options(title, labels, width, el) {
  return {
    title,
    width,
    height: 200,
    scales: {
      x: { time: false },
      // a flat series (one step, or a constant) gets a band around its value, not uPlot's 0–100
      y: {
        range: (_u, min, max) =>
          min === max
            ? [min - (Math.abs(min) || 1) / 2, max + (Math.abs(max) || 1) / 2]
            : uPlot.rangeNum(min, max, 0.1, true),
      },
    },
    cursor: { drag: { x: true, y: false } },
    // steps are integers: no ticks between them
    axes: [
      { label: 'step', incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] },
      {
        size: 70,
        values: (_u, splits, _axis, _space, incr) => {
          const labels = tickLabels(splits, incr);
          // what the canvas shows, for a reader of the page's markup (and its tests)
          el.dataset.yTicks = labels.join(' | ');
          return labels;
        },
      },
    ],
    series: [
      { label: 'step' },
      ...labels.map((label, i) => ({
        label,
        stroke: COLORS[i % COLORS.length],
        width: 2,
        points: { show: true, size: 5 },
        spanGaps: true,
      })),
    ],
  };
}

/** Series values per step: rows are step records ({ step, metrics }), keys metric names. */
export function seriesData(rows, keys) {
  return [
    rows.map((r) => r.step),
    ...keys.map((k) => rows.map((r) => (typeof r.metrics[k] === 'number' ? r.metrics[k] : null))),
  ];
}

/** The held-out eval before training (eval_start/*, recorded with step 0) as a point at step −1 of
 *  the eval/* series, as the report draws it (lib/report.ts): the before → after in one line. */
export function withStartEval(rows) {
  return rows.flatMap((r) => {
    const start = Object.entries(r.metrics).filter(([k]) => k.startsWith('eval_start/'));
    if (!start.length) return [r];
    const metrics = Object.fromEntries(start.map(([k, v]) => [`eval/${k.slice('eval_start/'.length)}`, v]));
    return [{ step: r.step - 1, metrics }, r];
  });
}

/** The rows a plot of `keys` reads: eval/* plots start with the eval before training. */
const plotRows = (keys, rows) => (keys.every((k) => k.startsWith('eval/')) ? withStartEval(rows) : rows);

/** A plot of `keys` over the steps; update(rows) redraws it with new steps (the zoom is kept). */
export function metricPlot(title, keys, rows, width) {
  const el = h('figure', { class: 'plot', dataset: { keys: keys.join(' ') } });
  const plot = new uPlot(options(title, keys, width, el), seriesData(plotRows(keys, rows), keys), el);
  return {
    el,
    update(newRows) {
      plot.setData(seriesData(plotRows(keys, newRows), keys), false);
      plot.redraw(true, true);
    },
    destroy() {
      plot.destroy();
    },
  };
}

/** One metric of several runs overlaid: runs are [{ run_id, steps: [{ step, metrics }] }]. */
export function comparePlot(key, title, runs, width) {
  const el = h('figure', { class: 'plot', dataset: { keys: key, runs: runs.map((r) => r.run_id).join(' ') } });
  const per = runs.map((r) => (key.startsWith('eval/') ? withStartEval(r.steps) : r.steps));
  const steps = [...new Set(per.flatMap((rows) => rows.map((s) => s.step)))].sort((a, b) => a - b);
  const data = [
    steps,
    ...per.map((rows) => {
      const at = new Map(rows.map((s) => [s.step, s.metrics[key]]));
      return steps.map((x) => (typeof at.get(x) === 'number' ? at.get(x) : null));
    }),
  ];
  const plot = new uPlot(
    options(
      title,
      runs.map((r) => r.run_id),
      width,
      el,
    ),
    data,
    el,
  );
  return { el, destroy: () => plot.destroy() };
}

/** Histogram bins of values: one per distinct value when there are few, else 10 equal bins. */
export function histogram(values) {
  const distinct = [...new Set(values)].sort((a, b) => a - b);
  if (distinct.length <= 12)
    return distinct.map((v) => ({ label: String(+v.toFixed(3)), count: values.filter((x) => x === v).length }));
  const lo = distinct[0];
  const hi = distinct.at(-1);
  const width = (hi - lo) / 10;
  const bins = Array.from({ length: 10 }, (_, i) => ({
    label: `${(lo + i * width).toFixed(2)}–${(lo + (i + 1) * width).toFixed(2)}`,
    count: 0,
  }));
  for (const v of values) bins[Math.min(9, Math.floor((v - lo) / width))].count++;
  return bins;
}

/** Bars of a histogram (heights set through the style object: no inline style markup). */
export function histogramBars(bins) {
  const max = Math.max(1, ...bins.map((b) => b.count));
  return h(
    'div',
    { class: 'hist' },
    bins.map((b) => {
      const bar = h('div', { class: 'bar', title: `reward ${b.label}: ${b.count} episode(s)` });
      bar.style.height = `${Math.round((b.count / max) * 100)}%`;
      return h(
        'div',
        { class: 'bin' },
        h('span', { class: 'count' }, b.count),
        h('div', { class: 'barbox' }, bar),
        h('span', { class: 'label' }, b.label),
      );
    }),
  );
}
