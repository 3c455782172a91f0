// Where tempo-rl writes what a command produces (--out): never under a virtual filesystem (/proc,
// /sys: Node's recursive mkdir spins there forever), never over what tempo-rl did not write, and
// over what it wrote only when asked (--force). A directory output is built in a sibling temporary
// directory and renamed into place, so a failure leaves the old output as it was.
import { existsSync, promises as fs, statSync, statfsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

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

/** Refuses a target on a virtual filesystem or below a file; returns the absolute path. */
export function checkOutputLocation(target: string, flag = '--out'): string {
  const abs = path.resolve(target);
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

/** A file output: refused if it exists (unless force) or is a directory. */
export function checkOutputFile(target: string, opts: { force?: boolean; flag?: string } = {}): string {
  const flag = opts.flag ?? '--out';
  const abs = checkOutputLocation(target, flag);
  if (!existsSync(abs)) return abs;
  if (statSync(abs).isDirectory()) throw new OutputRefused(`${flag} ${abs} is a directory; name a file`);
  if (!opts.force) throw new OutputRefused(`${flag} ${abs} exists; pass --force to overwrite it`);
  return abs;
}

/** What a directory output of tempo-rl records about itself (the files it wrote). */
export interface OutputManifest {
  generator: string;
  files: string[];
  [key: string]: unknown;
}

async function readManifest(dir: string, name: string): Promise<OutputManifest | null> {
  try {
    const m = JSON.parse(await fs.readFile(path.join(dir, name), 'utf8')) as OutputManifest;
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
