// `tempo-rl pack offline`: one tar file holding what a GPU host without network (many clusters are
// air-gapped) needs to run tempo-rl: the project, its node_modules pruned for the host's platform, the
// Node runtime, the temporal binary, and wheels of the trainer's Python requirements that the host's
// own python3 lacks (it brings torch). scripts/offline-install.sh, inside, sets it up on the host.
//
// The tar, unpacked into DIR:
//   DIR/tempo-rl/            the project with its node_modules (and their .tempo-rl-stamp, so bootstrap sees them installed)
//   DIR/node/bin/node        the Node runtime
//   DIR/venv/bin/temporal    the temporal CLI (DIR/venv becomes TEMPO_RL_VENV)
//   DIR/wheels/*.whl         Python wheels for the host
//   DIR/offline-pack.json    what went in
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import {
  BINARY_FILE,
  CONFIG_FILE,
  checkRegularFile,
  readBoundedBytes,
  readBoundedText,
  readPrefix,
  RECORD_FILE,
} from '../base/bounded-file.js';
import type { OwnOutput } from '../base/out-path.js';
import { downloadWheels, resolveWheels, trainerRequirements, type WheelPlan } from './offline-wheels.js';
import { LINUX_X64_GNU, type Target, glibcNeeded } from './offline-target.js';

export const PACK_MANIFEST = 'offline-pack.json';
export const LAYOUT = {
  project: 'tempo-rl',
  node: 'node/bin/node',
  temporal: 'venv/bin/temporal',
  wheels: 'wheels',
} as const;
export const INSTALL_SCRIPT = 'scripts/offline-install.sh';

// --- files and tallies -----------------------------------------------------------------------------

export interface Tally {
  files: number;
  bytes: number;
}
const tally = (): Tally => ({ files: 0, bytes: 0 });
const count = (t: Tally, bytes: number): void => {
  t.files += 1;
  t.bytes += bytes;
};

interface TreeEntry {
  rel: string;
  bytes: number;
  link: boolean;
}

/** Every file and symbolic link under dir (links not followed), relative to it. */
async function listTree(dir: string, skipDir: (rel: string) => boolean = () => false, rel = ''): Promise<TreeEntry[]> {
  const out: TreeEntry[] = [];
  for (const e of await fs.readdir(path.join(dir, rel), { withFileTypes: true })) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) {
      if (!skipDir(r)) out.push(...(await listTree(dir, skipDir, r)));
    } else if (e.isFile() || e.isSymbolicLink()) {
      out.push({ rel: r, bytes: (await fs.lstat(path.join(dir, r))).size, link: e.isSymbolicLink() });
    }
  }
  return out;
}

/** bootstrap.sh's stamp: the first 16 hex digits of the SHA-256 of the files, one after the other. */
export function stampOf(...files: string[]): string {
  const h = createHash('sha256');
  for (const f of files) h.update(readBoundedBytes(f, RECORD_FILE));
  return h.digest('hex').slice(0, 16);
}

// --- the project -----------------------------------------------------------------------------------

function gitList(root: string, which: '--cached' | '--others'): string[] | null {
  const res = spawnSync('git', ['ls-files', '-z', which, '--exclude-standard'], {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 1 << 28,
  });
  return res.status === 0 ? res.stdout.split('\0').filter(Boolean) : null;
}

/** A git checkout's files: those git tracks, and the untracked ones it does not ignore. */
function gitFiles(root: string): { tracked: string[]; untracked: string[] } | null {
  if (!existsSync(path.join(root, '.git'))) return null;
  const tracked = gitList(root, '--cached');
  const untracked = gitList(root, '--others');
  return tracked && untracked ? { tracked, untracked } : null;
}

export interface ProjectFiles {
  files: string[];
  tally: Tally;
  /** Untracked files (not ignored) of a git checkout: carried only with --untracked, listed either way;
   *  an offline pack or the output itself is never carried. */
  untracked: { carried: string[]; left: string[] };
}

/**
 * The project's files, relative to root: in a git checkout, what git tracks, and its untracked files
 * only when asked (`untracked`: a new command module not yet added; without it an untracked .env.local
 * or an earlier pack does not travel unnoticed: each is listed as left out); else the tree without
 * node_modules and .git. Never the output being written (`out`) nor another offline pack (a pack
 * written into the clone doubled the next one). node_modules is packed apart, pruned.
 */
export async function projectFiles(
  root: string,
  opts: { untracked?: boolean; out?: string } = {},
): Promise<ProjectFiles> {
  const git = gitFiles(root);
  const all = git
    ? [...git.tracked, ...git.untracked]
    : (await listTree(root, (r) => r === 'node_modules' || r === '.git')).map((e) => e.rel);
  const untracked = new Set(git?.untracked ?? []);
  const files: string[] = [];
  const left: string[] = [];
  const carried: string[] = [];
  const t = tally();
  const outName = opts.out ? path.resolve(opts.out) : null;
  const ownOutput = (abs: string) =>
    outName !== null && (abs === outName || abs.startsWith(`${path.dirname(outName)}/.${path.basename(outName)}.`));
  for (const rel of new Set([...all, INSTALL_SCRIPT])) {
    if (rel === 'node_modules' || rel.startsWith('node_modules/')) continue;
    const abs = path.join(root, rel);
    const st = await fs.lstat(abs).catch(() => null);
    // gone from the work tree (deleted, not yet committed), or a submodule's folder
    if (!st || !(st.isFile() || st.isSymbolicLink())) continue;
    const isUntracked = untracked.has(rel);
    if (ownOutput(abs) || (st.isFile() && (isUntracked || !git) && isOfflinePack(abs))) {
      if (isUntracked) left.push(`${rel} (an offline pack)`);
      continue;
    }
    if (isUntracked && !opts.untracked) {
      left.push(rel);
      continue;
    }
    if (isUntracked) carried.push(rel);
    files.push(rel);
    count(t, st.size);
  }
  return { files: files.sort(), tally: t, untracked: { carried: carried.sort(), left: left.sort() } };
}

/** Whether a file is an offline pack (of any compression): its tar's first entry is the manifest. */
export function isOfflinePack(abs: string): boolean {
  let head: Buffer;
  try {
    head = readPrefix(abs, 512);
  } catch {
    return false;
  }
  const tarHead = (b: Buffer) => b.subarray(0, 100).toString('latin1').replace(/\0.*$/s, '') === PACK_MANIFEST;
  const xz = head.subarray(0, 6).equals(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]));
  const gzip = head[0] === 0x1f && head[1] === 0x8b;
  if (!xz && !gzip) return tarHead(head);
  // the first 512 bytes of the tar, decompressed (head stops the decompressor)
  const res = spawnSync('sh', ['-c', `${xz ? 'xz' : 'gzip'} -dc -- "$1" 2>/dev/null | head -c 512`, 'sh', abs], {
    maxBuffer: 1024,
  });
  return res.stdout ? tarHead(res.stdout) : false;
}

/** --out: only a file this command wrote before is replaced (base/out-path.ts). */
export const PACK_OUTPUT: OwnOutput = { what: 'an offline pack', wrote: isOfflinePack };

// --- node_modules ----------------------------------------------------------------------------------

const LockEntry = z.object({
  dev: z.boolean().optional(),
  os: z.array(z.string()).optional(),
  cpu: z.array(z.string()).optional(),
  libc: z.array(z.string()).optional(),
  dependencies: z.record(z.string(), z.string()).optional(),
  optionalDependencies: z.record(z.string(), z.string()).optional(),
  peerDependencies: z.record(z.string(), z.string()).optional(),
});
const Lock = z.object({ lockfileVersion: z.number().min(2), packages: z.record(z.string(), LockEntry) });
type Lock = z.infer<typeof Lock>;
type LockEntry = z.infer<typeof LockEntry>;

export function readLock(root: string): Lock {
  const parsed = Lock.safeParse(JSON.parse(readBoundedText(path.join(root, 'package-lock.json'), RECORD_FILE)));
  if (!parsed.success)
    throw new Error(`package-lock.json: not a lockfile of version 2 or later (${parsed.error.issues[0]?.message})`);
  return parsed.data;
}

/** npm's os/cpu/libc fields: allowed values, or `!value` for refused ones; absent allows all. */
function allows(list: string[] | undefined, value: string): boolean {
  if (!list || list.length === 0) return true;
  if (list.includes(`!${value}`)) return false;
  const positive = list.filter((v) => !v.startsWith('!'));
  return positive.length === 0 || positive.includes(value);
}
const fitsTarget = (e: LockEntry, t: Target): boolean =>
  allows(e.os, t.os) && allows(e.cpu, t.cpu) && allows(e.libc, t.libc);
const packageName = (key: string): string => key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length);

/** Where `name`, required from the package at lock path `from`, lives: Node's lookup, nearest node_modules first. */
function resolveIn(lock: Lock, from: string, name: string): string | null {
  let dir = from;
  for (;;) {
    const candidate = dir ? `${dir}/node_modules/${name}` : `node_modules/${name}`;
    if (lock.packages[candidate]) return candidate;
    if (!dir) return null;
    const up = dir.lastIndexOf('/node_modules/');
    dir = up < 0 ? '' : dir.slice(0, up);
  }
}

/**
 * The lock paths running tempo-rl can reach: from package.json's dependencies (not its
 * devDependencies) through each package's dependencies, optional and peer ones included where
 * installed; never @types/* (declarations, never run) nor a package for another platform.
 */
export function runtimePackages(lock: Lock, target: Target): Set<string> {
  const keep = new Set<string>();
  const visit = (from: string, name: string): void => {
    const at = resolveIn(lock, from, name);
    if (!at || keep.has(at)) return;
    const e = lock.packages[at]!;
    if (e.dev || name.startsWith('@types/') || !fitsTarget(e, target)) return;
    keep.add(at);
    for (const d of Object.keys({ ...e.dependencies, ...e.optionalDependencies, ...e.peerDependencies })) visit(at, d);
  };
  const root: LockEntry = lock.packages[''] ?? {};
  for (const d of Object.keys({ ...root.dependencies, ...root.optionalDependencies })) visit('', d);
  return keep;
}

/** Files of kept packages that nothing loads at run time; `file` is relative to its package's folder. */
interface FileCut {
  what: string;
  drops: (file: string, pkg: string, target: Target) => boolean;
}
const FILE_CUTS: FileCut[] = [
  { what: 'source maps (*.map)', drops: (f) => f.endsWith('.map') },
  { what: 'type declarations (*.d.ts)', drops: (f) => /\.d\.[cm]?ts$/.test(f) },
  {
    what: 'core-bridge prebuilt libraries of other platforms',
    drops: (f, pkg, t) =>
      pkg === '@temporalio/core-bridge' && f.startsWith('releases/') && !f.startsWith(`releases/${t.bridgeRelease}/`),
  },
  // What builds core-bridge from source; its prebuilt library is what loads.
  {
    what: 'core-bridge Rust sources',
    drops: (f, pkg) =>
      pkg === '@temporalio/core-bridge' && /^(sdk-core|src|bridge-macros|scripts|ts)\/|^Cargo\.(lock|toml)$/.test(f),
  },
  {
    what: 'documentation (*.md, licences kept)',
    drops: (f) => /\.md$/i.test(f) && !/^(licen[cs]e|notice|copying)/i.test(path.basename(f)),
  },
];
const CUT_OTHER_PLATFORMS = 'packages for other platforms';
const CUT_UNREACHED = 'devDependencies, @types/* and packages only they need';
const CUT_LINKS = 'command links to cut files';

export interface NodeModulesPlan {
  /** Paths relative to node_modules. */
  files: string[];
  kept: Tally;
  cuts: ({ what: string } & Tally)[];
}

/** The lock path of the package that holds node_modules/`rel` (null: node_modules' own files, .bin). */
function ownerOf(lock: Lock, rel: string, cache: Map<string, string | null>): string | null {
  const dir = path.posix.dirname(`node_modules/${rel}`);
  if (cache.has(dir)) return cache.get(dir)!;
  const owner =
    dir === 'node_modules' || dir === '.'
      ? null
      : lock.packages[dir]
        ? dir
        : ownerOf(lock, path.posix.relative('node_modules', dir), cache);
  cache.set(dir, owner);
  return owner;
}

/**
 * Refuses a node_modules that does not match package-lock.json (bootstrap's stamp: the pack carries
 * it, so it must be true) or lacks a package the target needs (installed for another platform).
 */
function checkInstalled(root: string, keep: Set<string>, target: Target): void {
  const nm = path.join(root, 'node_modules');
  const want = stampOf(path.join(root, 'package-lock.json'));
  const have = existsSync(path.join(nm, '.tempo-rl-stamp'))
    ? readBoundedText(path.join(nm, '.tempo-rl-stamp'), CONFIG_FILE).trim()
    : '';
  if (have !== want)
    throw new Error(
      `${nm} is not installed for package-lock.json (its .tempo-rl-stamp is ${have || 'absent'}, not ${want}): run bin/tempo-rl once, then pack`,
    );
  const absent = [...keep].filter((k) => !existsSync(path.join(root, k)));
  if (absent.length > 0)
    throw new Error(
      `node_modules lacks ${absent.join(', ')}, which ${target.name} needs (installed for another platform?): run npm ci on a ${target.name} machine`,
    );
  if (
    keep.has('node_modules/@temporalio/core-bridge') &&
    !existsSync(path.join(nm, '@temporalio/core-bridge/releases', target.bridgeRelease, 'index.node'))
  )
    throw new Error(`node_modules/@temporalio/core-bridge has no prebuilt library for ${target.bridgeRelease}`);
}

/** node_modules pruned for the target host: what runtimePackages keeps, less FILE_CUTS, with a tally of what each cut saves. */
export async function pruneNodeModules(root: string, target: Target): Promise<NodeModulesPlan> {
  const nm = path.join(root, 'node_modules');
  const lock = readLock(root);
  const keep = runtimePackages(lock, target);
  checkInstalled(root, keep, target);

  const cuts = new Map<string, Tally>();
  const cut = (what: string, bytes: number): void => count(cuts.get(what) ?? cuts.set(what, tally()).get(what)!, bytes);
  const dropped = new Set<string>();
  const owners = new Map<string, string | null>();
  const entries = await listTree(nm);
  const reasonFor = (e: TreeEntry): string | null => {
    const owner = ownerOf(lock, e.rel, owners);
    if (!owner) return null;
    if (!keep.has(owner)) return fitsTarget(lock.packages[owner]!, target) ? CUT_UNREACHED : CUT_OTHER_PLATFORMS;
    const inPkg = path.posix.relative(owner, `node_modules/${e.rel}`);
    return FILE_CUTS.find((c) => c.drops(inPkg, packageName(owner), target))?.what ?? null;
  };
  for (const e of entries) {
    const why = reasonFor(e);
    if (why) {
      dropped.add(e.rel);
      cut(why, e.bytes);
    }
  }
  // A link (node_modules/.bin/tsc) to a cut file would dangle on the host.
  for (const e of entries.filter((x) => x.link && !dropped.has(x.rel))) {
    const to = path.posix.relative(
      nm,
      path.resolve(path.dirname(path.join(nm, e.rel)), await fs.readlink(path.join(nm, e.rel))),
    );
    if (dropped.has(to)) {
      dropped.add(e.rel);
      cut(CUT_LINKS, e.bytes);
    }
  }
  const kept = tally();
  const files: string[] = [];
  for (const e of entries.filter((x) => !dropped.has(x.rel))) {
    count(kept, e.bytes);
    files.push(e.rel);
  }
  return {
    files: files.sort(),
    kept,
    cuts: [...cuts].map(([what, t]) => ({ what, ...t })).sort((a, b) => b.bytes - a.bytes),
  };
}

// --- binaries --------------------------------------------------------------------------------------

/** Refuses a file that is not an executable of the target (an ELF file for its processor), without
 *  waiting on a FIFO or reading a device (base/bounded-file.ts). */
export function checkBinary(file: string, target: Target, what: string): void {
  let head: Buffer;
  try {
    checkRegularFile(file, BINARY_FILE);
    head = Buffer.concat([readPrefix(file, 20), Buffer.alloc(20)]);
  } catch (err) {
    throw new Error(`${what} ${file}: ${(err as Error & { reason?: string }).reason ?? (err as Error).message}`);
  }
  const elf = head.readUInt32BE(0) === 0x7f454c46;
  if (!elf || head.readUInt16LE(18) !== target.elfMachine)
    throw new Error(`${what} ${file} is not a ${target.name} executable`);
}

/** The Node runtime's version; it must run here and be 20 or later (package.json's engines). */
export function nodeVersion(node: string): string {
  const res = spawnSync(node, ['--version'], { encoding: 'utf8' });
  if (res.status !== 0) throw new Error(`${node}: cannot run it (${res.error?.message ?? res.stderr.trim()})`);
  const v = res.stdout.trim().split('\n')[0]!;
  const major = Number(/^v(\d+)\.\d+\.\d+$/.exec(v)?.[1]);
  if (Number.isNaN(major)) throw new Error(`${node} is not a Node runtime (--version printed ${JSON.stringify(v)})`);
  if (major < 20) throw new Error(`${node} is Node ${v}; tempo-rl needs 20 or later`);
  return v;
}

// --- the tar ---------------------------------------------------------------------------------------

export const COMPRESSIONS = ['xz', 'gzip', 'none'] as const;
export type Compression = (typeof COMPRESSIONS)[number];

/** GNU tar over a list of paths relative to dir, stored as listed (links as links), owned by root. */
function writeTar(dir: string, listFile: string, out: string, compression: Compression): void {
  const flag = { xz: ['-J'], gzip: ['-z'], none: [] }[compression];
  // xz at its default level (-6), on every core: on 2 loaded cores a full pack takes minutes.
  const env = { ...process.env, XZ_OPT: '-6 -T0' };
  const args = [
    '-c',
    '-f',
    out,
    ...flag,
    '--no-recursion',
    '--null',
    '--owner=0',
    '--group=0',
    '--numeric-owner',
    '-C',
    dir,
    '-T',
    listFile,
  ];
  const res = spawnSync('tar', args, { env, stdio: ['ignore', 2, 'pipe'], encoding: 'utf8' });
  if (res.status !== 0) throw new Error(`tar failed: ${res.error?.message ?? res.stderr.trim()}`);
}

/** A hard link where the file system allows, else a copy: the tar reads it under its packed name. */
async function placeFile(from: string, to: string): Promise<void> {
  await fs.mkdir(path.dirname(to), { recursive: true });
  await fs.link(from, to).catch(() => fs.copyFile(from, to));
}

// --- the pack --------------------------------------------------------------------------------------

export interface PackOptions {
  root: string;
  /** The output file (checked by the caller: checkOutputFile). */
  out: string;
  node: string;
  temporal: string;
  compression: Compression;
  /** null: no wheels (--no-wheels). */
  wheels: Omit<WheelPlan, 'requirements' | 'target'> | null;
  target?: Target;
  /** Carry a git checkout's untracked files (not ignored) too. */
  untracked?: boolean;
  log?: (line: string) => void;
}

export interface PackSummary {
  out: string;
  bytes: number;
  compression: Compression;
  seconds: number;
  platform: string;
  glibc: string;
  project: Tally & { untracked: ProjectFiles['untracked'] };
  nodeModules: Tally & { cuts: ({ what: string } & Tally)[] };
  node: { from: string; version: string; bytes: number };
  temporal: { from: string; bytes: number };
  wheels: null | {
    pythonVersion: string;
    files: { file: string; bytes: number }[];
    bytes: number;
    leftToHost: string[];
    /** --leave-out: resolved, not carried (name==version); and the patterns that matched nothing. */
    leftOut: string[];
    leaveOutUnmatched: string[];
  };
}

/** Builds the pack into a sibling temporary file, then renames it to opts.out. */
export async function buildOfflinePack(opts: PackOptions): Promise<PackSummary> {
  const started = Date.now();
  const target = opts.target ?? LINUX_X64_GNU;
  const log = opts.log ?? (() => undefined);
  checkBinary(opts.node, target, 'the Node runtime');
  const version = nodeVersion(opts.node);
  checkBinary(opts.temporal, target, 'the temporal binary');
  const project = await projectFiles(opts.root, { untracked: opts.untracked, out: opts.out });
  const nodeModules = await pruneNodeModules(opts.root, target);

  const dir = path.dirname(opts.out);
  await fs.mkdir(dir, { recursive: true });
  const stage = await fs.mkdtemp(path.join(dir, `.${path.basename(opts.out)}.stage-`));
  const partial = path.join(dir, `.${path.basename(opts.out)}.partial-${randomBytes(4).toString('hex')}`);
  try {
    await fs.symlink(opts.root, path.join(stage, LAYOUT.project));
    await placeFile(opts.node, path.join(stage, LAYOUT.node));
    await placeFile(opts.temporal, path.join(stage, LAYOUT.temporal));
    const wheels = opts.wheels
      ? await stageWheels(
          { ...opts.wheels, requirements: trainerRequirements(opts.root, opts.wheels.python), target },
          stage,
          log,
        )
      : null;
    await fs.mkdir(path.join(stage, LAYOUT.wheels), { recursive: true });
    const manifest = {
      generator: 'tempo-rl pack offline',
      created: new Date().toISOString(),
      platform: target.name,
      glibc: target.glibc,
      // what offline-install.sh checks: the level these wheels and Node need (not the --glibc asked for)
      glibcNeeded: glibcNeeded(wheels?.files.map((w) => w.file) ?? []),
      node: version,
      pythonVersion: wheels?.pythonVersion ?? null,
      wheels: wheels?.files.map((w) => w.file) ?? [],
      // --leave-out: resolved but not carried, so that the host's `pip check` failures are expected
      leftOut: wheels?.leftOut ?? [],
    };
    await fs.writeFile(path.join(stage, PACK_MANIFEST), `${JSON.stringify(manifest, null, 1)}\n`);
    const list = [
      PACK_MANIFEST,
      LAYOUT.node,
      LAYOUT.temporal,
      LAYOUT.wheels,
      ...(wheels?.files ?? []).map((w) => `${LAYOUT.wheels}/${w.file}`),
      ...project.files.map((f) => `${LAYOUT.project}/${f}`),
      ...nodeModules.files.map((f) => `${LAYOUT.project}/node_modules/${f}`),
    ];
    const listFile = path.join(dir, `${path.basename(partial)}.list`);
    await fs.writeFile(listFile, list.join('\0'));
    log(`writing ${list.length} files (${opts.compression === 'none' ? 'uncompressed' : opts.compression})`);
    try {
      writeTar(stage, listFile, partial, opts.compression);
    } finally {
      await fs.rm(listFile, { force: true });
    }
    await fs.rename(partial, opts.out);
    return {
      out: opts.out,
      bytes: (await fs.stat(opts.out)).size,
      compression: opts.compression,
      seconds: Math.round((Date.now() - started) / 100) / 10,
      platform: target.name,
      glibc: target.glibc,
      project: { ...project.tally, untracked: project.untracked },
      nodeModules: { ...nodeModules.kept, cuts: nodeModules.cuts },
      node: { from: opts.node, version, bytes: (await fs.stat(opts.node)).size },
      temporal: { from: opts.temporal, bytes: (await fs.stat(opts.temporal)).size },
      wheels,
    };
  } finally {
    await fs.rm(partial, { force: true });
    await fs.rm(stage, { recursive: true, force: true });
  }
}

async function stageWheels(
  plan: WheelPlan,
  stage: string,
  log: (line: string) => void,
): Promise<NonNullable<PackSummary['wheels']>> {
  log(
    `resolving ${plan.requirements.length + plan.extra.length} Python requirements for CPython ${plan.pythonVersion} on ${plan.target.name}`,
  );
  const work = path.join(stage, '.pip');
  await fs.mkdir(work);
  const { carry, onHost, leftOut, unmatched } = await resolveWheels(plan, work);
  log(
    `downloading ${carry.length} wheels (${onHost.length} packages left to the host, ${leftOut.length} left out by --leave-out)`,
  );
  for (const p of unmatched) log(`--leave-out ${p} matched nothing resolved`);
  const dest = path.join(stage, LAYOUT.wheels);
  await downloadWheels(plan, carry, dest);
  const files = await Promise.all(
    carry.map(async (w) => ({ file: w.file, bytes: (await fs.stat(path.join(dest, w.file))).size })),
  );
  return {
    pythonVersion: plan.pythonVersion,
    files,
    bytes: files.reduce((s, f) => s + f.bytes, 0),
    leftToHost: onHost,
    leftOut: leftOut.map((w) => `${w.name}==${w.version}`),
    leaveOutUnmatched: unmatched,
  };
}
