// tempo-rl pack offline --out FILE [--python-version V] [--glibc V] [--host-packages FILE] [--wheel SPEC]...
//   [--leave-out NAMES]... [--no-wheels] [--untracked] [--node PATH] [--compression xz|gzip|none] [--force] [--json]
// One tar file with what a linux-x64 GPU host without network needs to run tempo-rl (cli/offline-pack.ts).
import path from 'node:path';
import type { Command } from 'commander';
import { z } from 'zod';
import { CONFIG_FILE, readBoundedText } from '../base/bounded-file.js';
import { checkOutputFile } from '../base/out-path.js';
import { REPO_ROOT, temporalBin } from '../base/paths.js';
import { action, printJson } from './common.js';
import {
  buildOfflinePack,
  COMPRESSIONS,
  checkBinary,
  INSTALL_SCRIPT,
  LAYOUT,
  nodeVersion,
  PACK_OUTPUT,
  type PackSummary,
} from './offline-pack.js';
import { checkGlibc, DEFAULT_GLIBC, LINUX_X64_GNU, linuxX64Gnu } from './offline-target.js';
import { parseHostPackages, supportedPythons } from './offline-wheels.js';

const Options = z.object({
  out: z.string().min(1),
  pythonVersion: z.string().regex(/^3\.\d{1,2}$/, 'a CPython version such as 3.12'),
  glibc: z.string(),
  hostPackages: z.string().min(1).optional(),
  wheel: z.array(z.string().regex(/^\s*[A-Za-z0-9][A-Za-z0-9._-]*/, 'a requirement such as vllm==0.26.0')).default([]),
  leaveOut: z
    .array(
      z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*\*?$/, 'a distribution name, or a prefix ending in * (nvidia-*)'),
    )
    .default([]),
  wheels: z.boolean(),
  untracked: z.boolean().optional(),
  node: z.string().min(1).optional(),
  compression: z.enum(COMPRESSIONS),
  force: z.boolean().optional(),
  json: z.boolean().optional(),
});
type Options = z.infer<typeof Options>;

const usage = (message: string): Error => Object.assign(new Error(message), { exitCode: 2 });
const flagOf = (key: string) => `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

function parseOptions(raw: unknown): Options {
  const parsed = Options.safeParse(raw);
  if (!parsed.success) {
    const i = parsed.error.issues[0]!;
    const key = String(i.path[0] ?? '');
    const value = (raw as Record<string, unknown>)[key];
    // a repeatable flag's values come as a list: name the one refused
    const given = Array.isArray(value) && typeof i.path[1] === 'number' ? value[i.path[1]] : value;
    throw usage(
      `pack offline: ${flagOf(key)}: ${i.message}${typeof given === 'string' ? `, given ${JSON.stringify(given)}` : ''}`,
    );
  }
  const o = parsed.data;
  if (!o.wheels && (o.wheel.length > 0 || o.hostPackages || o.leaveOut.length > 0))
    throw usage(
      'pack offline: --no-wheels leaves out every wheel; drop --wheel, --host-packages and --leave-out, or --no-wheels',
    );
  // the versions the trainer runs on (pyproject.toml): 3.99 has no wheels, 3.10 no trainer
  const pythons = supportedPythons(REPO_ROOT);
  if (pythons && !pythons.includes(o.pythonVersion))
    throw usage(
      `pack offline: --python-version ${o.pythonVersion}: the trainer runs on CPython ${pythons.join(' or ')} (pyproject.toml requires-python)`,
    );
  try {
    checkGlibc(o.glibc);
  } catch (err) {
    throw usage(`pack offline: --glibc: ${(err as Error).message}`);
  }
  return o;
}

function hostPackages(file: string | undefined): Map<string, string | undefined> {
  if (!file) return new Map();
  try {
    return parseHostPackages(readBoundedText(file, CONFIG_FILE));
  } catch (err) {
    throw usage(`--host-packages ${file}: ${(err as Error).message}`);
  }
}

/** --node names a runnable Node 20+ for the host's platform (a usage error otherwise). */
function checkNode(node: string): string {
  try {
    checkBinary(node, LINUX_X64_GNU, '--node');
    nodeVersion(node);
  } catch (err) {
    const m = (err as Error).message;
    throw usage(m.startsWith('--node') ? m : `--node ${m}`);
  }
  return node;
}

const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

function untrackedLines(u: PackSummary['project']['untracked']): string[] {
  const list = (files: string[]) => files.map((f) => `                  ${f}`);
  return [
    ...(u.carried.length ? [`  untracked     ${u.carried.length} carried (--untracked):`, ...list(u.carried)] : []),
    ...(u.left.length
      ? [
          `  untracked     ${u.left.length} left out (git does not track them; --untracked carries them):`,
          ...list(u.left),
        ]
      : []),
  ];
}

function printSummary(s: PackSummary): void {
  const lines = [
    `wrote ${s.out}: ${mib(s.bytes)} (${s.compression === 'none' ? 'uncompressed' : s.compression}, for ${s.platform}, glibc ${s.glibc} or later) in ${s.seconds} s`,
    `  project       ${s.project.files} files, ${mib(s.project.bytes)}`,
    ...untrackedLines(s.project.untracked),
    `  node_modules  ${s.nodeModules.files} files, ${mib(s.nodeModules.bytes)}; left out:`,
    ...s.nodeModules.cuts.map((c) => `                  ${mib(c.bytes).padStart(10)}  ${c.what} (${c.files} files)`),
    `  node          ${s.node.version}, ${mib(s.node.bytes)} (from ${s.node.from})`,
    `  temporal      ${mib(s.temporal.bytes)} (from ${s.temporal.from})`,
    s.wheels
      ? `  wheels        ${s.wheels.files.length} for CPython ${s.wheels.pythonVersion}, ${mib(s.wheels.bytes)}${s.wheels.files.map((w) => `\n                  ${w.file}`).join('')}\n                (left to the host: ${s.wheels.leftToHost.join(', ') || 'nothing'})${s.wheels.leftOut.length ? `\n                (left out, --leave-out: ${s.wheels.leftOut.join(', ')})` : ''}${s.wheels.leaveOutUnmatched.length ? `\n                (--leave-out matched nothing resolved: ${s.wheels.leaveOutUnmatched.join(', ')})` : ''}`
      : '  wheels        none (--no-wheels)',
    `on the host: tar -xf ${path.basename(s.out)} -C DIR && DIR/${LAYOUT.project}/${INSTALL_SCRIPT}`,
  ];
  console.log(lines.join('\n'));
}

export function register(program: Command): void {
  const pack = program.command('pack').description('bundles of tempo-rl for hosts that cannot install it themselves');
  pack
    .command('offline')
    .description(
      'one tar file with everything a linux-x64 GPU host without network needs to run tempo-rl (its own python3 brings torch)',
    )
    .requiredOption('--out <file>', 'the tar file to write (outside the clone, or it is left out of the next pack)')
    .option('--python-version <v>', "the host's CPython version, for the wheels", '3.12')
    .option('--glibc <v>', "the host's glibc (`ldd --version`), for the wheels' manylinux tags", DEFAULT_GLIBC)
    .option(
      '--host-packages <file>',
      "the host's Python packages (pip freeze, pip list, or one name a line): never carried",
    )
    .option(
      '--wheel <spec>',
      'one more requirement to carry, with its dependencies, e.g. vllm==0.26.0 (repeatable)',
      (v: string, prev: string[] = []) => [...prev, v],
    )
    .option(
      '--leave-out <names>',
      'resolved wheels not to carry, comma-separated: names or prefixes ending in * (nvidia-*); the host must never import them (repeatable)',
      (v: string, prev: string[] = []) => [...prev, ...v.split(',').map((n) => n.trim())],
    )
    .option('--no-wheels', 'carry no Python wheels (the host has every package)')
    .option('--untracked', "also carry the clone's untracked files that git does not ignore (listed either way)")
    .option('--node <path>', 'the Node runtime to carry (default: the one running this)')
    .option('--compression <kind>', `${COMPRESSIONS.join(', ')}`, 'xz')
    .option('--force', 'overwrite --out if it is an offline pack written before')
    .option('--json', 'one JSON object on stdout')
    .action(
      action(async (raw: unknown) => {
        const o = parseOptions(raw);
        const out = checkOutputFile(o.out, { force: o.force, own: PACK_OUTPUT });
        const target = linuxX64Gnu(o.glibc);
        const summary = await buildOfflinePack({
          root: REPO_ROOT,
          out,
          node: o.node ? checkNode(path.resolve(o.node)) : process.execPath,
          temporal: path.resolve(temporalBin()),
          compression: o.compression,
          target,
          untracked: o.untracked,
          wheels: o.wheels
            ? {
                pythonVersion: o.pythonVersion,
                extra: o.wheel,
                host: hostPackages(o.hostPackages),
                python: 'python3',
                leaveOut: o.leaveOut,
              }
            : null,
          log: (line) => process.stderr.write(`[pack] ${line}\n`),
        });
        if (o.json) printJson(summary);
        else printSummary(summary);
      }),
    );
}
