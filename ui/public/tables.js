// Tables that sort by any column (click its header; again for the other order) and export what they
// hold as CSV or JSONL (the raw values, not the page's rounding). Cells are built with h(): text only.
import { h } from './dom.js';

/** A CSV field: quoted where it must be; a text that a spreadsheet would run as a formula
 *  (=, +, -, @ first) gets a leading apostrophe, since model text and labels end up here. */
export function csvField(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  let s = typeof v === 'string' ? v : JSON.stringify(v);
  if (/^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function toCsv(columns, rows) {
  const lines = [columns.map((c) => csvField(c.key)).join(',')];
  for (const r of rows) lines.push(columns.map((c) => csvField(c.value(r))).join(','));
  return `${lines.join('\n')}\n`;
}

export function toJsonl(columns, rows) {
  return rows
    .map((r) => JSON.stringify(Object.fromEntries(columns.map((c) => [c.key, c.value(r) ?? null]))))
    .join('\n');
}

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

const compare = (a, b) => {
  if (a === b) return 0;
  if (a === null || a === undefined || Number.isNaN(a)) return 1; // none last, either order
  if (b === null || b === undefined || Number.isNaN(b)) return -1;
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
};

/**
 * columns: [{ key, label, value(row) (sorted and exported), cell(row) (shown; default the value),
 * class, descFirst }]; rows: the data; name: the export's file name. Returns the table with its
 * export buttons. `rowAttrs(row)`: the <tr>'s attributes. `sort`: an object that keeps the order
 * chosen ({ key, dir }) for the next table drawn with it (a page that redraws as a run goes on).
 */
export function dataTable({ name, columns, rows, rowAttrs = () => ({}), attrs = {}, sort = {} }) {
  let order = rows.slice();
  const body = h('tbody');
  const draw = () =>
    body.replaceChildren(
      ...order.map((r) =>
        h(
          'tr',
          rowAttrs(r),
          columns.map((c) => h('td', { class: c.class }, c.cell ? c.cell(r) : (c.value(r) ?? '-'))),
        ),
      ),
    );
  const heads = columns.map((c) => h('th', { 'aria-sort': 'none', dataset: { key: c.key } }));
  const sortBy = (c, th) => {
    order = rows.slice().sort((a, b) => {
      const va = c.value(a);
      const vb = c.value(b);
      // rows without a value stay last in both orders
      if (va === null || va === undefined) return vb === null || vb === undefined ? 0 : 1;
      if (vb === null || vb === undefined) return -1;
      return sort.dir * compare(va, vb);
    });
    for (const other of heads) other.setAttribute('aria-sort', 'none');
    th.setAttribute('aria-sort', sort.dir > 0 ? 'ascending' : 'descending');
  };
  columns.forEach((c, i) => {
    const th = heads[i];
    const button = h('button', { type: 'button', class: 'sort', title: `sort by ${c.label}` }, c.label);
    button.addEventListener('click', () => {
      sort.dir = sort.key === c.key ? -sort.dir : c.descFirst ? -1 : 1;
      sort.key = c.key;
      sortBy(c, th);
      draw();
    });
    th.append(button);
    if (sort.key === c.key) sortBy(c, th);
  });
  draw();
  const exportButton = (label, fn, ext, type) => {
    const b = h('button', { type: 'button', class: `export export-${ext}` }, label);
    b.addEventListener('click', () => download(`${name}.${ext}`, fn(columns, order), type));
    return b;
  };
  return h(
    'div',
    { class: 'data-table' },
    h(
      'p',
      { class: 'table-tools' },
      `${rows.length} row(s) · export `,
      exportButton('CSV', toCsv, 'csv', 'text/csv'),
      ' ',
      exportButton('JSONL', toJsonl, 'jsonl', 'application/jsonl'),
    ),
    h('table', attrs, h('thead', {}, h('tr', {}, heads)), body),
  );
}
