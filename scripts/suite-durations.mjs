// Per-file durations of a test run, for scripts/test.sh. Two roles:
// - a node:test reporter (`--test-reporter=./scripts/suite-durations.mjs`): writes a JSON line per test
//   file as it ends, { file, seconds, passed, failed, skipped }, the seconds from the file's start (its
//   process spawned) to its end, hooks and imports included;
// - a command, `node scripts/suite-durations.mjs table TS_JSONL PYTEST_JUNIT_XML OUT_JSON [TOP]`: merges the
//   TS files' lines with pytest's JUnit XML (per file: the sum of its tests' setup, call and teardown),
//   writes OUT_JSON and prints the slowest files and each runner's total.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export default async function* fileDurations(source) {
  const files = {};
  const entry = (file) => (files[path.relative(ROOT, file)] ??= { seconds: 0, passed: 0, failed: 0, skipped: 0 });
  const started = {};
  for await (const { type, data } of source) {
    if (!data?.file) continue;
    const isFile = data.nesting === 0 && data.name === data.file;
    if (type === 'test:dequeue' && isFile) started[data.file] = performance.now();
    else if (type === 'test:complete' && isFile) {
      const e = entry(data.file);
      e.seconds = round((performance.now() - (started[data.file] ?? performance.now())) / 1000);
      yield `${JSON.stringify({ file: path.relative(ROOT, data.file), ...e })}\n`;
    } else if ((type === 'test:pass' || type === 'test:fail') && data.details?.type !== 'suite') {
      const e = entry(data.file);
      if (data.skip || data.todo) e.skipped++;
      else if (type === 'test:pass') e.passed++;
      else e.failed++;
    }
  }
}

const round = (s) => Math.round(s * 10) / 10;

/** pytest's JUnit XML → file → { seconds, passed, failed, skipped }; a test's file from its classname
 *  (tests.python.test_x or tests.python.test_x.TestClass). */
function pytestFiles(xml) {
  const files = {};
  for (const [, attrs, body = ''] of xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const attr = Object.fromEntries([...attrs.matchAll(/(\w+)="([^"]*)"/g)].map(([, k, v]) => [k, v]));
    const parts = (attr.classname ?? '').split('.');
    const module = parts.findIndex((p) => p.startsWith('test_'));
    const file = `${parts.slice(0, module >= 0 ? module + 1 : parts.length).join('/')}.py`;
    const e = (files[file] ??= { seconds: 0, passed: 0, failed: 0, skipped: 0 });
    e.seconds += Number(attr.time ?? 0);
    if (/<skipped\b/.test(body)) e.skipped++;
    else if (/<(failure|error)\b/.test(body)) e.failed++;
    else e.passed++;
  }
  for (const e of Object.values(files)) e.seconds = round(e.seconds);
  return files;
}

function table(tsJsonl, junitXml, outJson, top = 15) {
  const lines = existsSync(tsJsonl) ? readFileSync(tsJsonl, 'utf8').split('\n').filter(Boolean) : [];
  const ts = Object.fromEntries(lines.map((l) => JSON.parse(l)).map(({ file, ...e }) => [file, e]));
  const py = existsSync(junitXml) ? pytestFiles(readFileSync(junitXml, 'utf8')) : {};
  const total = (files) => round(Object.values(files).reduce((s, e) => s + e.seconds, 0));
  const slowest = (files) => Object.entries(files).sort((a, b) => b[1].seconds - a[1].seconds);
  // One line a file, slowest first: a recorded file diffs line by line.
  const block = (files) => `{\n${slowest(files).map(([f, e]) => `  ${JSON.stringify(f)}: ${JSON.stringify(e)}`).join(',\n')}\n }`;
  const totals = { typescript: total(ts), python: total(py) };
  writeFileSync(outJson, `{\n "totals_s": ${JSON.stringify(totals)},\n "typescript": ${block(ts)},\n "python": ${block(py)}\n}\n`);
  const rows = slowest({ ...ts, ...py });
  console.log(`slowest files (all ${rows.length}: ${outJson}):`);
  for (const [file, e] of rows.slice(0, Number(top))) console.log(`${e.seconds.toFixed(1).padStart(8)} s  ${file}${e.failed ? `  (${e.failed} failed)` : ''}`);
  console.log(`files: TypeScript ${Object.keys(ts).length} in ${totals.typescript} s, Python ${Object.keys(py).length} in ${totals.python} s`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd !== 'table' || args.length < 3) {
    console.error('usage: node scripts/suite-durations.mjs table TS_JSONL PYTEST_JUNIT_XML OUT_JSON [TOP]');
    process.exit(2);
  }
  table(...args);
}
