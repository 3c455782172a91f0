// Where tempo-rl writes what a command produces (--out): never under a virtual filesystem (/proc,
// /sys: Node's recursive mkdir spins there forever), never over anything but a regular file tempo-rl
// wrote (not a link, a device, a FIFO, a file of the user's), and over that only when asked (--force).
// An output is built beside its place (a temporary file or directory) and renamed into it, so a
// failure leaves the old output as it was.
import { randomBytes } from 'node:crypto';
import { existsSync, promises as fs, lstatSync, readlinkSync, type Stats, statSync, statfsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileKind, readJsonRecordAsync } from './bounded-file.js';

export class OutputRefused extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = 'OutputRefused';
  }
}

const VIRTUAL_ROOTS = ['/proc', '/sys'];
// statfs f_type of pseudo filesystems (linux/magic.h): proc, sysfs, debugfs, tracefs, securityfs, cgroup, cgroup2, devpts, bpf, configfs
const VIRTUAL_FS_TYPES = new Set([
  0x9fa0, 0x62656572, 0x64626720, 0x74726163, 0x73636673, 0x27e0eb, 0x63677270, 0x1cd1, 0xcafe4a11, 0x62656570,
]);

function nearestExisting(p: string): string {
  let cur = p;
  while (!existsSync(cur) && path.dirname(cur) !== cur) cur = path.dirname(cur);
  return cur;
}

/** The virtual filesystem an absolute path is on or would be created on (/proc, /sys, or the nearest
 *  existing folder when statfs says it is one), or null: no place for files tempo-rl writes. */
export function virtualFilesystemOf(abs: string): string | null {
  const under = VIRTUAL_ROOTS.find((r) => abs === r || abs.startsWith(`${r}/`));
  if (under) return under;
  const anchor = nearestExisting(abs);
  try {
    if (VIRTUAL_FS_TYPES.has(Number(statfsSync(anchor).type))) return anchor;
  } catch {
    /* statfs unsupported: the path prefixes above still apply */
  }
  return null;
}

/**
 * A path as a user gave it (YAML, --set, a variable), checked and with a leading `~` expanded: a shell
 * would have expanded it, but not inside quotes, YAML or --set, where it would become a folder named
 * `~` in the working directory. Expanded (not refused) because that is what the user meant, once, on
 * the host where the config is loaded (the resolved config carries the absolute path to every process).
 * `~user` is refused (tempo-rl does not look up other users' homes). Blank or whitespace-padded values
 * and control characters are refused: they name folders nobody means.
 */
export function parseUserPath(p: string): { path: string } | { problem: string } {
  if (p.trim() === '') return { problem: 'blank (only whitespace)' };
  if (p.trim() !== p) return { problem: 'starts or ends with whitespace' };
  const control = /[\u0000-\u001f\u007f]/.exec(p);
  if (control)
    return {
      problem: `holds ${control[0] === '\0' ? 'a NUL' : `the control character ${JSON.stringify(control[0])}`}`,
    };
  if (p === '~' || p.startsWith('~/')) return { path: path.join(os.homedir(), p.slice(1)) };
  if (p.startsWith('~'))
    return { problem: `${p.split('/')[0]} (another user's home) is not expanded; give the absolute path` };
  return { path: p };
}

function refused(flag: string, target: string, why: string): OutputRefused {
  return new OutputRefused(`${flag} ${JSON.stringify(target)}: ${why}`);
}

/** Refuses a blank, padded or control-character target, one on a virtual filesystem or below a file;
 *  returns the absolute path. */
export function checkOutputLocation(target: string, flag = '--out'): string {
  if (target === '') throw refused(flag, target, 'empty (it would mean the working directory); name the output');
  const given = parseUserPath(target);
  if ('problem' in given) throw refused(flag, target, given.problem);
  const abs = path.resolve(given.path);
  const virtual = virtualFilesystemOf(abs);
  if (virtual)
    throw new OutputRefused(
      `${flag} ${abs}: refusing to write under ${virtual} (a virtual filesystem, not a place for files)`,
    );
  const anchor = nearestExisting(abs);
  if (anchor !== abs && !statSync(anchor).isDirectory())
    throw new OutputRefused(`${flag} ${abs}: ${anchor} is a file, not a directory`);
  return abs;
}

/** What is at a path, without following a link: null when nothing is. */
function lstatOrNull(abs: string): Stats | null {
  try {
    return lstatSync(abs);
  } catch {
    return null;
  }
}

/** How an output command tells a file it wrote before (the only regular file --force replaces). */
export interface OwnOutput {
  /** "an offline pack", "a tempo-rl report": what the refusal says the file is not. */
  what: string;
  wrote: (abs: string) => boolean;
}

/**
 * A file output. Refused, whatever --force says: a symbolic link (to /dev/stdout, to a file elsewhere),
 * a device, a FIFO, a socket, a directory, a name ending in `/`, and a regular file that `own` says
 * tempo-rl did not write. A file tempo-rl wrote is replaced only with --force.
 */
export function checkOutputFile(
  target: string,
  opts: { force?: boolean; flag?: string; own?: OwnOutput } = {},
): string {
  const flag = opts.flag ?? '--out';
  if (/\/\.{0,2}$/.test(target) || target === '.' || target === '..')
    throw refused(flag, target, 'names a folder; name the file to write');
  const given = parseUserPath(target);
  const at = 'path' in given ? path.resolve(given.path) : '';
  const st = at ? lstatOrNull(at) : null;
  const replaceable = 'regular files tempo-rl wrote are the only thing it replaces';
  if (st?.isSymbolicLink()) throw refused(flag, target, `is a symbolic link (to ${readlinkSync(at)}); ${replaceable}`);
  if (st?.isDirectory()) throw refused(flag, target, 'is a directory; name a file');
  if (st && !st.isFile()) throw refused(flag, target, `is ${fileKind(st)}; ${replaceable}`);
  const abs = checkOutputLocation(target, flag);
  if (!st) return abs;
  if (opts.own && !opts.own.wrote(abs))
    throw refused(flag, target, `exists and is not ${opts.own.what} tempo-rl wrote; refusing to replace it`);
  if (!opts.force) throw new OutputRefused(`${flag} ${abs} exists; pass --force to overwrite it`);
  return abs;
}

/**
 * Writes a file output whole or not at all: into a sibling temporary file, then renamed over `abs`
 * (a rename replaces the name, never writes through it). What is at `abs` then must still be nothing
 * or a regular file (checkOutputFile checked it; the default outputs, a run's report.html, are
 * checked here).
 */
export async function writeOutputFile(abs: string, data: string | Uint8Array): Promise<void> {
  const st = lstatOrNull(abs);
  if (st && !st.isFile())
    throw new OutputRefused(`${abs} is ${fileKind(st)}; regular files tempo-rl wrote are the only thing it replaces`);
  await fs.mkdir(path.dirname(abs), { recursive: true });
  const tmp = path.join(path.dirname(abs), `.${path.basename(abs)}.tmp-${randomBytes(4).toString('hex')}`);
  try {
    await fs.writeFile(tmp, data, { flag: 'wx' });
    await fs.rename(tmp, abs);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
}

/** What a directory output of tempo-rl records about itself (the files it wrote). */
export interface OutputManifest {
  generator: string;
  files: string[];
  [key: string]: unknown;
}

async function readManifest(dir: string, name: string): Promise<OutputManifest | null> {
  try {
    const m = (await readJsonRecordAsync(path.join(dir, name))) as OutputManifest;
    return Array.isArray(m.files) ? m : null;
  } catch {
    return null;
  }
}

async function listFiles(dir: string, rel = ''): Promise<string[]> {
  const out: string[] = [];
  for (const e of await fs.readdir(path.join(dir, rel), { withFileTypes: true })) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await listFiles(dir, r)));
    else out.push(r);
  }
  return out;
}

/**
 * Writes a directory output: `build(tmp)` fills a sibling temporary directory and returns the
 * manifest (written as `manifestName`), which is then renamed to `outDir`. An existing `outDir` must
 * be empty, or (with force) a previous output whose every file its manifest names.
 */
export async function writeOutputDir(
  outDir: string,
  opts: { force?: boolean; manifestName: string; flag?: string },
  build: (tmp: string) => Promise<OutputManifest>,
): Promise<void> {
  const flag = opts.flag ?? '--out';
  const abs = checkOutputLocation(outDir, flag);
  let replace = false;
  if (existsSync(abs)) {
    if (!statSync(abs).isDirectory()) throw new OutputRefused(`${flag} ${abs} is a file, not a directory`);
    const present = await listFiles(abs);
    if (present.length > 0) {
      const manifest = await readManifest(abs, opts.manifestName);
      if (!manifest)
        throw new OutputRefused(
          `${flag} ${abs} is not empty (${present.length} files, e.g. ${present[0]}) and was not written by tempo-rl; choose another folder`,
        );
      const ours = new Set([...manifest.files, opts.manifestName]);
      const foreign = present.find((f) => !ours.has(f));
      if (foreign)
        throw new OutputRefused(
          `${flag} ${abs} holds ${foreign}, which tempo-rl did not write; refusing to replace the folder`,
        );
      if (!opts.force)
        throw new OutputRefused(
          `${flag} ${abs} already holds a ${manifest.generator} output; pass --force to replace it`,
        );
    }
    replace = true;
  }
  await fs.mkdir(path.dirname(abs), { recursive: true });
  const tmp = await fs.mkdtemp(path.join(path.dirname(abs), `.${path.basename(abs)}.tmp-`));
  let old: string | null = null;
  try {
    const manifest = await build(tmp);
    await fs.writeFile(path.join(tmp, opts.manifestName), `${JSON.stringify(manifest, null, 1)}\n`);
    if (replace) {
      old = `${tmp}.old`;
      await fs.rename(abs, old);
    }
    await fs.rename(tmp, abs);
  } catch (err) {
    if (old && !existsSync(abs)) await fs.rename(old, abs).catch(() => undefined);
    await fs.rm(tmp, { recursive: true, force: true });
    throw err;
  }
  if (old) await fs.rm(old, { recursive: true, force: true });
}
