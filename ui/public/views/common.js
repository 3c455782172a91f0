// What several views share: the breadcrumb trail and polling that stops with its view.
import { fill, h, link } from '../dom.js';

/** Breadcrumbs: [text, path, params] entries, the last one as plain text. */
export function setCrumbs(crumbs, entries) {
  const items = [link('runs', '')];
  entries.forEach(([text, path, params], i) => {
    items.push(h('span', { class: 'sep' }, '›'));
    items.push(i === entries.length - 1 || !path ? h('span', {}, text) : link(text, path, params));
  });
  fill(crumbs, items);
}

/** Calls `tick` every `ms` until the returned function is called (or the signal aborts); a failed tick
 *  is shown in `status` and retried. */
export function poll(ms, tick, signal, status) {
  let timer = null;
  let stopped = false;
  const run = async () => {
    if (stopped || signal.aborted) return;
    try {
      await tick();
      if (status) fill(status);
    } catch (err) {
      if (status && !signal.aborted)
        fill(status, h('span', { class: 'error' }, `update failed: ${err.message ?? err}`));
    }
    if (!stopped && !signal.aborted) timer = setTimeout(run, ms);
  };
  timer = setTimeout(run, ms);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
