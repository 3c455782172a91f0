// tempo-rl pack offline and its inputs, without building a pack: what of the clone travels (untracked
// files only when asked and always listed; never an earlier pack or the output), how a pack is told
// from another file, the host's package list as `pip list` prints it, the glibc tags, and a wheel
// that exists only for a newer glibc named with that glibc (PyPI, where it can be reached).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { isOfflinePack, PACK_MANIFEST, projectFiles } from '../../cli/offline-pack.js';
import { glibcNeeded, linuxX64Gnu, manylinuxTags } from '../../cli/offline-target.js';
import { leftOutBy, parseHostPackages, resolveWheels } from '../../cli/offline-wheels.js';
import { pypiUnreachable } from '../../testing/pypi.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-pack-input-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
const sh = (cmd: string, cwd: string) => {
  const r = spawnSync('sh', ['-c', cmd], { cwd, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
};

/** A tar whose first entry is the pack manifest, as tempo-rl writes it, compressed or not. */
function fakePack(dir: string, name: string, compress: '' | 'gzip' | 'xz'): string {
  const src = mkdtempSync(path.join(tmp, 'src-'));
  writeFileSync(path.join(src, PACK_MANIFEST), '{}');
  writeFileSync(path.join(src, 'big'), Buffer.alloc(4096, 1));
  const out = path.join(dir, name);
  sh(`tar -cf - ${PACK_MANIFEST} big ${compress ? `| ${compress} -c` : ''} > '${out}'`, src);
  return out;
}

test('an untracked .env.local and an earlier pack do not travel unlisted; --untracked carries the one', async () => {
  const clone = path.join(tmp, 'clone');
  mkdirSync(path.join(clone, 'cli'), { recursive: true });
  writeFileSync(path.join(clone, 'cli', 'main.ts'), '// tracked');
  sh('git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init', clone);
  writeFileSync(path.join(clone, '.env.local'), 'API_KEY=secret');
  writeFileSync(path.join(clone, 'cli', 'new-command.ts'), '// not added yet');
  fakePack(clone, 'tempo-rl-offline.tar.xz', 'xz');
  const out = path.join(clone, 'again.tar');

  const plain = await projectFiles(clone, { out });
  assert.deepEqual(plain.files, ['cli/main.ts']);
  assert.deepEqual(plain.untracked, {
    carried: [],
    left: ['.env.local', 'cli/new-command.ts', 'tempo-rl-offline.tar.xz (an offline pack)'],
  });

  const all = await projectFiles(clone, { out, untracked: true });
  assert.deepEqual(all.files, ['.env.local', 'cli/main.ts', 'cli/new-command.ts']);
  assert.deepEqual(all.untracked.left, ['tempo-rl-offline.tar.xz (an offline pack)']);
});

test('a pack is told from other files whatever its compression', () => {
  const d = mkdtempSync(path.join(tmp, 'packs-'));
  for (const c of ['', 'gzip', 'xz'] as const) assert.ok(isOfflinePack(fakePack(d, `p-${c || 'none'}.tar`, c)), c);
  writeFileSync(path.join(d, 'thesis.tex'), 'my only copy');
  assert.equal(isOfflinePack(path.join(d, 'thesis.tex')), false);
  sh(`tar -cf other.tar thesis.tex`, d);
  assert.equal(isOfflinePack(path.join(d, 'other.tar')), false);
});

test("the host's packages from a `pip list` table: its header and rule are not packages", () => {
  const table = `Package            Version      Editable project location
------------------ ------------ -------------------------
torch              2.11.0+cu130
Typing_Extensions  4.12.2
mylib              0.1          /src/mylib
`;
  assert.deepEqual(
    [...parseHostPackages(table)],
    [
      ['torch', '2.11.0+cu130'],
      ['typing-extensions', '4.12.2'],
      ['mylib', '0.1'],
    ],
  );
});

test('--glibc: every manylinux level up to it, and the legacy aliases', () => {
  assert.deepEqual(manylinuxTags('2.31').slice(0, 2), ['manylinux_2_31_x86_64', 'manylinux_2_30_x86_64']);
  assert.equal(manylinuxTags('2.31').at(-4), 'manylinux_2_5_x86_64');
  assert.deepEqual(manylinuxTags('2.31').slice(-3), [
    'manylinux2014_x86_64',
    'manylinux2010_x86_64',
    'manylinux1_x86_64',
  ]);
  assert.equal(linuxX64Gnu().glibc, '2.35', 'the default covers Ubuntu 22.04 images');
  for (const bad of ['2.99', '2.17', '2', 'x'])
    assert.throws(() => linuxX64Gnu(bad), /expected the host's glibc as 2\.N/);
});

/** What resolveWheels resolves the requirements for: CPython 3.12 on glibc 2.28, a host with nothing. */
const planFor = (requirements: string[]) => ({
  pythonVersion: '3.12',
  requirements,
  extra: [],
  host: new Map<string, string | undefined>(),
  python: 'python3',
  target: linuxX64Gnu('2.28'),
});

test('a wheel published only for a newer glibc is named, with the glibc it needs', async (t) => {
  const unreachable = pypiUnreachable();
  if (unreachable) return t.skip(unreachable);
  // llguidance 1.7 (a dependency of vLLM 0.26.0) is published as manylinux_2_31 wheels only
  await assert.rejects(
    resolveWheels(planFor(['llguidance>=1.7,<1.8']), mkdtempSync(path.join(tmp, 'pip-'))),
    /no wheel of llguidance<1\.8,>=1\.7 for CPython 3\.12 on manylinux 2\.5 to 2\.28 x86_64 \(--glibc 2\.28\): its wheel llguidance-1\.7\.\d+-\S+-manylinux_2_31_x86_64\.whl needs glibc 2\.31/,
  );
});

test('a pack records the glibc its wheels and Node need, not the level it was built for (a host between the two can run it)', () => {
  assert.equal(glibcNeeded([]), '2.28', 'Node 20 alone');
  assert.equal(
    glibcNeeded([
      'pydantic-2.14.4-py3-none-any.whl',
      'pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl',
      'temporalio-1.35.0-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl',
    ]),
    '2.28',
  );
  assert.equal(glibcNeeded(['llguidance-1.7.0-cp39-abi3-manylinux_2_31_x86_64.whl', 'x-1-py3-none-any.whl']), '2.31');
  assert.equal(glibcNeeded(['pillow-13.0.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl']), '2.28');
});

test('--leave-out: resolved wheels not carried, listed; a pattern that matches nothing named; what the trainer needs refused', async (t) => {
  const unreachable = pypiUnreachable();
  if (unreachable) return t.skip(unreachable);
  const plan = planFor(['python-dateutil==2.9.0.post0']);
  const work = mkdtempSync(path.join(tmp, 'pip-'));
  const out = await resolveWheels({ ...plan, leaveOut: ['Six', 'nvidia-*'] }, work);
  assert.deepEqual(
    out.carry.map((w) => w.name),
    ['python-dateutil'],
  );
  assert.deepEqual(
    out.leftOut.map((w) => w.name),
    ['six'],
  );
  assert.deepEqual(out.unmatched, ['nvidia-*']);
  await assert.rejects(
    resolveWheels({ ...plan, leaveOut: ['python-*'] }, work),
    /--leave-out python-\* matches python-dateutil, which the trainer needs \(pyproject\.toml\): leave it in/,
  );
  assert.equal(leftOutBy(['nvidia-*', 'z3_solver'], 'z3-solver'), 'z3_solver');
  assert.equal(leftOutBy(['nvidia-*'], 'nvidia-cutlass-dsl'), 'nvidia-*');
  assert.equal(leftOutBy(['nvidia-*'], 'vllm'), undefined);
});
