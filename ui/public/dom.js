// DOM helpers. Everything a run holds (model text, answers, labels, ids) goes in as text nodes or
// attribute values, never as markup: no innerHTML anywhere in the page.

/** An element: h('a', { href: '#/', class: 'x' }, 'text', child, [more]). Attributes are set one by
 *  one; children that are strings or numbers become text nodes. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') for (const [event, fn] of Object.entries(v)) el.addEventListener(event, fn);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A link to a page of the app: route plus query values (each encoded). */
export function route(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return `#/${path}${s ? `?${s}` : ''}`;
}

export function link(text, path, params, attrs = {}) {
  return h('a', { href: route(path, params), ...attrs }, text);
}

/** A number for a table: '-' for none, else `digits` decimals (integers as they are). */
export function num(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return '-';
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a >= 1e5 || a < 1e-3) ? v.toExponential(2) : v.toFixed(digits);
}

export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : '-';
}

export function seconds(ms) {
  if (ms === null || ms === undefined) return '-';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

const temporalListeners = [];

/** Calls `fn(state)` with the Temporal server's state (up, down, none) each API answer reports. */
export function onTemporalState(fn) {
  temporalListeners.push(fn);
}

/** GET a JSON API path; a refusal or failure throws with the server's message. */
export async function api(path, signal) {
  const res = await fetch(path, { signal, headers: { Accept: 'application/json' } });
  const state = res.headers.get('X-Temporal-State');
  if (state) for (const fn of temporalListeners) fn(state);
  const body = await res.json().catch(() => ({ error: `${res.status} ${res.statusText}` }));
  if (!res.ok) throw new Error(body.error ?? `${res.status} ${res.statusText}`);
  return body;
}

export function apiPath(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return `/api/${path}${s ? `?${s}` : ''}`;
}

export function badge(status) {
  return h('span', { class: `badge st-${String(status ?? 'none').toLowerCase()}` }, status ?? '-');
}

/** A plain table (headers, row elements); tables.js dataTable sorts and exports. */
export function table(headers, rows, attrs = {}) {
  return h(
    'table',
    attrs,
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headers.map((t) => h('th', {}, t)),
      ),
    ),
    h('tbody', {}, rows),
  );
}
