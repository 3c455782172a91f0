// Interactive plots (uPlot): hover shows each series' value at the step under the cursor, dragging
// across the plot zooms into those steps, a double click zooms out.
import uPlot from '/vendor/uPlot.esm.js';
import { h } from './dom.js';

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4d7c0f', '#be185d'];

function options(title, labels, width) {
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
    axes: [{ label: 'step', incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] }, { size: 60 }],
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

/** A plot of `keys` over the steps; update(rows) redraws it with new steps (the zoom is kept). */
export function metricPlot(title, keys, rows, width) {
  const el = h('figure', { class: 'plot', dataset: { keys: keys.join(' ') } });
  const plot = new uPlot(options(title, keys, width), seriesData(rows, keys), el);
  return {
    el,
    update(newRows) {
      plot.setData(seriesData(newRows, keys), false);
      plot.redraw(true, true);
    },
    destroy() {
      plot.destroy();
    },
  };
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
