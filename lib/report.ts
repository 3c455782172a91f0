// `tempo-rl report RUN`: one self-contained HTML page (inline SVG, no scripts, no network) with the
// run's metrics per step, read from <state>/runs/<run>/metrics.jsonl. Its headline is the held-out eval
// before → after; the training reward follows as halves with their spread and a smoothed curve, since
// one step's mean over a few dozen sampled episodes moves by ±0.1 on its own (docs/tasks.md).
import path from 'node:path';
import type { TempoConfig } from '../config/schema.js';
import { DATA_FILE, readBoundedTextAsync, readPrefix, type UnreadableFile } from '../base/bounded-file.js';
import { type OwnOutput, writeOutputFile } from '../base/out-path.js';
import { checkRunId, stateLayout } from '../stores/layout.js';
import { headlineLines, learningSummary, smoothed } from './learning-summary.js';

export const REPORT_PLOTS: Array<{ key: string; title: string }> = [
  { key: 'rollout/raw_reward', title: 'training reward per step (noisy; line: 3-step mean)' },
  { key: 'eval/reward', title: 'held-out eval reward (step −1: before training)' },
  { key: 'rollout/first_answer_correct', title: 'first calc_score answer right' },
  { key: 'rollout/tool_call_rate', title: 'turns with a parseable calc_score call' },
  { key: 'rollout/first_turn_tool_call_rate', title: 'first turns with a parseable calc_score call' },
  { key: 'rollout/recovery_rate', title: 'right after a wrong first answer' },
  { key: 'sft/nll', title: 'SFT loss (masked NLL)' },
  { key: 'rollout/response_len', title: 'response length (tokens)' },
  {
    key: 'rollout/truncated_ratio',
    title: 'episodes TRUNCATED (token budget; out of turns too where rollout.truncate_status_when_out_of_turns)',
  },
  { key: 'train/train_rollout_logprob_abs_diff', title: 'train/rollout logprob |diff|' },
  { key: 'train/pg_loss', title: 'policy-gradient loss' },
  { key: 'perf/step_time', title: 'step time (s)' },
  { key: 'perf/rollout_tokens_per_second', title: 'rollout throughput (tokens/s)' },
  { key: 'perf/train_tokens_per_second', title: 'train throughput (tokens/s)' },
  { key: 'perf/train_peak_allocated_gib', title: "trainer's GPU memory, peak allocated (GiB)" },
];

type Row = Record<string, number>;

const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
const fmt = (v: number) => (Math.abs(v) >= 1000 || (Math.abs(v) < 0.01 && v !== 0) ? v.toExponential(2) : v.toFixed(3));

function plot(rows: Row[], key: string, title: string, smooth = false): string {
  const pts = rows
    .filter((r) => typeof r[key] === 'number' && Number.isFinite(r[key]))
    .map((r) => [r.step!, r[key]!] as const);
  const W = 360,
    H = 200,
    L = 56,
    B = 28,
    T = 24,
    R = 12;
  if (!pts.length)
    return `<figure><figcaption>${esc(title)}</figcaption><svg width="${W}" height="${H}"><text x="${W / 2}" y="${H / 2}" text-anchor="middle" fill="#888">no data</text></svg></figure>`;
  const xs = pts.map((p) => p[0]),
    ys = pts.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y0 === y1) {
    const pad = y0 === 0 ? 0.5 : Math.abs(y0) * 0.5; // a flat 1e-7 must not read as 0 ± 0.5
    [y0, y1] = [y0 - pad, y1 + pad];
  }
  const sx = (x: number) => L + ((x - x0) / Math.max(x1 - x0, 1)) * (W - L - R);
  const sy = (y: number) => H - B - ((y - y0) / (y1 - y0)) * (H - B - T);
  const line = pts.map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' ');
  const trend =
    smooth && pts.length > 2
      ? `<polyline points="${smoothed(ys)
          .map((y, i) => `${sx(xs[i]!).toFixed(1)},${sy(y).toFixed(1)}`)
          .join(' ')}" fill="none" stroke="#dc2626" stroke-width="2.5"/>`
      : '';
  const dots = pts
    .map(
      (p) =>
        `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="3"><title>step ${p[0]}: ${fmt(p[1])}</title></circle>`,
    )
    .join('');
  return `<figure><figcaption>${esc(title)}</figcaption><svg width="${W}" height="${H}" role="img" aria-label="${esc(title)}">
<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#999"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#999"/>
<text x="${L - 4}" y="${sy(y1) + 4}" text-anchor="end" font-size="11">${fmt(y1)}</text><text x="${L - 4}" y="${sy(y0) + 4}" text-anchor="end" font-size="11">${fmt(y0)}</text>
<text x="${L}" y="${H - 8}" font-size="11">step ${x0}</text><text x="${W - R}" y="${H - 8}" text-anchor="end" font-size="11">step ${x1}</text>
<polyline points="${line}" fill="none" stroke="${trend ? '#93c5fd' : '#2563eb'}" stroke-width="${trend ? 1 : 2}"/>${trend}<g fill="#2563eb">${dots}</g></svg></figure>`;
}

export async function readMetrics(cfg: TempoConfig, runId: string): Promise<Row[]> {
  const file = path.join(stateLayout(cfg.state_dir).runs, checkRunId(runId), 'metrics.jsonl');
  let text: string;
  try {
    text = await readBoundedTextAsync(file, DATA_FILE);
  } catch (err) {
    if ((err as UnreadableFile).reason === 'no such file') throw new Error(`run ${runId} has no metrics yet (${file})`);
    throw err;
  }
  return text.split('\n').flatMap((line, i) => (line ? [metricsRow(line, file, i + 1)] : []));
}

function metricsRow(line: string, file: string, lineNo: number): Row {
  let row: unknown;
  try {
    row = JSON.parse(line);
  } catch {
    throw new Error(`${file} line ${lineNo} is not JSON: ${JSON.stringify(line.slice(0, 80))}`);
  }
  if (row === null || typeof row !== 'object' || Array.isArray(row))
    throw new Error(`${file} line ${lineNo} is not a JSON object`);
  return row as Row;
}

/** The start-of-run eval (eval_start/*, recorded with step 0) as a point at step −1 of the eval series. */
function withStartEval(rows: Row[]): Row[] {
  return rows.flatMap((r) =>
    typeof r['eval_start/reward'] === 'number'
      ? [{ step: r.step! - 1, 'eval/reward': r['eval_start/reward'] }, r]
      : [r],
  );
}

export function renderReport(runId: string, rows: Row[]): string {
  const last = rows[rows.length - 1] ?? {};
  const evalRows = withStartEval(rows);
  const table = Object.entries(last)
    .map(([k, v]) => `<tr><td>${esc(k)}</td><td>${fmt(v)}</td></tr>`)
    .join('');
  return `${REPORT_HEAD}<title>tempo-rl run ${esc(runId)}</title>
<style>body{font-family:system-ui,sans-serif;margin:24px;color:#111}main{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0;border:1px solid #ddd;border-radius:6px;padding:8px}figcaption{font-weight:600;margin-bottom:4px}
.headline{max-width:70em;margin-bottom:16px}.headline p{margin:4px 0}table{border-collapse:collapse;margin-top:24px}td{border-bottom:1px solid #eee;padding:2px 12px;font-size:13px}</style></head>
<body><h1>Run ${esc(runId)}</h1><p>${rows.length} steps recorded.</p>
<section class="headline">${headlineLines(learningSummary(rows))
    .map((l, i) => (i ? `<p>${esc(l)}</p>` : `<h2>${esc(l)}</h2>`))
    .join('')}</section><main>
${REPORT_PLOTS.map((p) => plot(p.key.startsWith('eval/') ? evalRows : rows, p.key, p.title, p.key === 'rollout/raw_reward')).join('\n')}
</main><h2>Last step</h2><table>${table}</table></body></html>`;
}

/** How every report starts: what tells a report tempo-rl wrote (the only file report --force replaces). */
const REPORT_HEAD =
  '<!doctype html><html><head><meta charset="utf-8"><meta name="generator" content="tempo-rl report">';

export const REPORT_OUTPUT: OwnOutput = {
  what: 'a report',
  // the head, or that of reports written before the generator tag: the charset, then the run's title
  wrote: (abs) => {
    const head = readPrefix(abs, 256).toString('utf8');
    return (
      head.startsWith(REPORT_HEAD) ||
      head.startsWith('<!doctype html><html><head><meta charset="utf-8"><title>tempo-rl run ')
    );
  },
};

/** `out`: a file the caller checked (checkOutputFile); default the run's own report.html, which
 *  tempo-rl wrote and rewrites. */
export async function writeReport(cfg: TempoConfig, runId: string, out?: string): Promise<string> {
  const rows = await readMetrics(cfg, runId);
  const file = out ?? path.join(stateLayout(cfg.state_dir).runs, runId, 'report.html');
  await writeOutputFile(path.resolve(file), renderReport(runId, rows));
  return file;
}
