// The unit tier's list (tests/unit.txt) cannot rot silently: every entry exists, belongs to the fast
// tier (not tests/long.txt), and starts nothing — neither the file nor the testing/ helpers it imports
// (followed to the end; production modules are not followed, their starters are named below) imports
// what starts an engine, a Temporal server, chromium or a child process, or calls such a starter.
// Python files are read with their sibling test modules and conftest.py. Reads files only: cheap.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { REPO_ROOT } from '../../base/paths.js';

/** A list file's entries (the format scripts/test.sh reads): paths, `#` comments and blank lines skipped. */
const entries = (list: string) =>
  readFileSync(path.join(REPO_ROOT, list), 'utf8')
    .split('\n')
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean);

const unit = entries('tests/unit.txt');
const SELF = 'tests/ts/unit-tier.test.ts';
const long = entries('tests/long.txt');

// Modules whose import starts (or exists to start) something: by the end of the specifier.
const TS_MODULES = [
  'node:child_process',
  'child_process',
  '@temporalio/testing',
  'testing/temporal.js',
  'testing/engines.js',
  'testing/run.js',
  'testing/chromium.js',
  'supervise/server.js',
];
// Starters called by name, and what a file that uses a running engine or the CLI names.
const TS_TEXT =
  /\b(spawn|spawnSync|spawnDetached|execFile|execFileSync|execSync|fork|startServer|startEngines|startStack|startTestServer|startEpisodeHarness|startS3Server|testEngines)\s*\(|TestWorkflowEnvironment|bin\/tempo-rl|TEMPO_RL_TEST_ENGINE_URLS|\/usr\/bin\/chromium/;
const PY_MODULES = [
  'subprocess',
  'multiprocessing',
  'torch.multiprocessing',
  'torch.distributed.run',
  'temporalio.client',
  'temporalio.worker',
  'dp_job',
];
const PY_TEXT =
  /\btorchrun\b|\bPopen\b|os\.system|WorkflowEnvironment|Client\.connect\(|TEMPO_RL_TEST_(GPU_)?ENGINE_URL|\bvllm serve\b/;

/** A TS file's module specifiers: static imports, re-exports and dynamic imports. */
function tsImports(source: string): string[] {
  const found = source.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"]([^'"]+)['"]/g);
  return [...found].map((m) => m[1]!);
}

/** The file and every testing/ helper it reaches through relative imports. */
function tsClosure(file: string): string[] {
  const seen = new Set<string>();
  const visit = (f: string) => {
    if (seen.has(f)) return;
    seen.add(f);
    for (const spec of tsImports(readFileSync(f, 'utf8'))) {
      if (!spec.startsWith('.')) continue;
      const target = path.resolve(path.dirname(f), spec).replace(/\.js$/, '.ts');
      if (target.startsWith(path.join(REPO_ROOT, 'testing') + path.sep) && existsSync(target)) visit(target);
    }
  };
  visit(path.join(REPO_ROOT, file));
  return [...seen];
}

/** A Python file's imported modules, top-level and inside functions. */
function pyImports(source: string): string[] {
  const mods: string[] = [];
  for (const m of source.matchAll(/^\s*(?:from\s+([\w.]+)\s+import\b|import\s+([\w., ]+))/gm)) {
    if (m[1]) mods.push(m[1]);
    else mods.push(...(m[2] ?? '').split(',').map((s) => s.trim().split(/\s+/)[0]!));
  }
  return mods;
}

/** The file, conftest.py, and the sibling modules of tests/python it imports (followed to the end). */
function pyClosure(file: string): string[] {
  const dir = path.join(REPO_ROOT, 'tests', 'python');
  const seen = new Set<string>();
  const visit = (f: string) => {
    if (seen.has(f)) return;
    seen.add(f);
    for (const mod of pyImports(readFileSync(f, 'utf8'))) {
      const sibling = path.join(dir, `${mod}.py`);
      if (!mod.includes('.') && existsSync(sibling)) visit(sibling);
    }
  };
  visit(path.join(REPO_ROOT, file));
  visit(path.join(dir, 'conftest.py'));
  return [...seen];
}

/** What in `files` starts something: "file: module" or "file: text", relative to the repository. */
function starters(files: string[], imports: (s: string) => string[], modules: string[], text: RegExp): string[] {
  const out: string[] = [];
  for (const f of files) {
    const source = readFileSync(f, 'utf8');
    const rel = path.relative(REPO_ROOT, f);
    for (const spec of imports(source)) {
      if (modules.some((m) => spec === m || spec.endsWith(`/${m}`) || spec.startsWith(`${m}.`)))
        out.push(`${rel}: imports ${spec}`);
    }
    const hit = text.exec(source);
    if (hit) out.push(`${rel}: ${hit[0]}`);
  }
  return out;
}

test('tests/unit.txt lists existing fast-tier test files, TS and Python', () => {
  const ts = unit.filter((e) => e.endsWith('.ts'));
  const py = unit.filter((e) => /\.py(::|$)/.test(e));
  assert.deepEqual([...ts, ...py].sort(), [...unit].sort(), 'each entry is a TS test file or a Python test');
  for (const e of unit) assert.ok(existsSync(path.join(REPO_ROOT, e.replace(/::.*/, ''))), `${e} exists`);
  // scripts/test.sh's fast tier runs tests/ts/*.test.ts (top level) and tests/python, less tests/long.txt
  for (const e of ts) assert.match(e, /^tests\/ts\/[^/]+\.test\.ts$/, `${e} is a top-level TS test file`);
  for (const e of py) assert.match(e, /^tests\/python\/test_[^/]+\.py/, `${e} is a Python test file`);
  const isLong = (e: string) =>
    long.some((l) => e === l || e.startsWith(`${l}::`) || (l.endsWith('/') && e.startsWith(l)));
  assert.deepEqual(unit.filter(isLong), [], 'a unit file is a fast one: none is in tests/long.txt');
  assert.equal(new Set(unit).size, unit.length, 'no entry twice');
});

test('no unit TS file (nor a testing/ helper it imports) starts an engine, a server, chromium or a process', () => {
  const found = unit
    .filter((e) => e.endsWith('.ts') && e !== SELF) // this file names the starters it looks for
    .flatMap((e) => starters(tsClosure(e), tsImports, TS_MODULES, TS_TEXT).map((s) => `${e} → ${s}`));
  assert.deepEqual(found, [], 'move these files out of tests/unit.txt (or the starter out of the file)');
});

test('no unit Python file (nor a test module it imports) starts an engine, a server or a process', () => {
  const found = unit
    .filter((e) => /\.py(::|$)/.test(e))
    .flatMap((e) =>
      starters(pyClosure(e.replace(/::.*/, '')), pyImports, PY_MODULES, PY_TEXT).map((s) => `${e} → ${s}`),
    );
  assert.deepEqual(found, [], 'move these files out of tests/unit.txt (or the starter out of the file)');
});

test('the check sees a starter: the files it must refuse are refused', () => {
  const ts = (f: string) => starters(tsClosure(f), tsImports, TS_MODULES, TS_TEXT);
  const py = (f: string) => starters(pyClosure(f), pyImports, PY_MODULES, PY_TEXT);
  // through a testing/ helper: startEpisodeHarness starts a Temporal dev server
  assert.notDeepEqual(ts('tests/ts/rollout-episode-edges.test.ts'), []);
  assert.notDeepEqual(ts('tests/ts/report.test.ts'), []); // chromium
  assert.notDeepEqual(ts('tests/ts/engine-control.test.ts'), []); // engines
  assert.notDeepEqual(ts('tests/ts/run-workflow.test.ts'), []); // TestWorkflowEnvironment, through run-standins
  assert.notDeepEqual(py('tests/python/test_data_parallel.py'), []); // torchrun
  assert.notDeepEqual(py('tests/python/test_checkpoint_store.py'), []); // S3Proxy through test_blobstore_s3
  assert.notDeepEqual(py('tests/python/test_worker.py'), []); // a Temporal server and a trainer process
});
