// The host an offline pack (cli/offline-pack.ts) is built for: its platform as npm's lock,
// core-bridge's prebuilt folders, ELF headers and pip's wheel tags name it, and its glibc, which
// decides the manylinux wheels it can load.

/** A host platform. */
export interface Target {
  name: string;
  os: string;
  cpu: string;
  libc: string;
  /** The host's glibc, major.minor ("2.35"). */
  glibc: string;
  bridgeRelease: string;
  elfMachine: number;
  pipPlatforms: string[];
}

/** Current GPU images: Ubuntu 22.04 (CUDA 12 images) has glibc 2.35; vLLM 0.26.0's llguidance 1.7 is
 *  published only as manylinux_2_31 wheels, so a lower default cannot pack it. */
export const DEFAULT_GLIBC = '2.35';
/** Node 20's official binaries need glibc 2.28 (RHEL 8, Ubuntu 20.04 has 2.31); 2.42 is the newest
 *  glibc at this release. */
const GLIBC_MINOR = { min: 28, max: 42 };

/** A --glibc value (2.N), or an error saying which are taken. */
export function checkGlibc(value: string): string {
  const minor = /^2\.(\d{1,2})$/.exec(value)?.[1];
  if (minor === undefined || Number(minor) < GLIBC_MINOR.min || Number(minor) > GLIBC_MINOR.max)
    throw new Error(
      `expected the host's glibc as 2.N, from 2.${GLIBC_MINOR.min} (what Node 20 needs) to 2.${GLIBC_MINOR.max}, given ${JSON.stringify(value)} (\`ldd --version\` on the host says it)`,
    );
  return value;
}

/** pip matches platform tags exactly: every manylinux level a host of this glibc loads, newest first,
 *  and the legacy aliases older wheels carry (manylinux2014 is 2.17, manylinux2010 2.12, manylinux1 2.5). */
export function manylinuxTags(glibc: string, arch = 'x86_64'): string[] {
  const top = Number(glibc.split('.')[1]);
  return [
    ...Array.from({ length: top - 4 }, (_, i) => `manylinux_2_${top - i}_${arch}`),
    `manylinux2014_${arch}`,
    `manylinux2010_${arch}`,
    `manylinux1_${arch}`,
  ];
}

/** The one host platform supported now, at a glibc level. */
export function linuxX64Gnu(glibc = DEFAULT_GLIBC): Target {
  return {
    name: 'linux-x64-gnu',
    os: 'linux',
    cpu: 'x64',
    libc: 'glibc',
    glibc: checkGlibc(glibc),
    bridgeRelease: 'x86_64-unknown-linux-gnu',
    elfMachine: 0x3e,
    pipPlatforms: manylinuxTags(glibc),
  };
}

export const LINUX_X64_GNU: Target = linuxX64Gnu();

/** The glibc a host needs to load these wheels and Node 20 (2.28): the highest manylinux level among the
 *  wheels' platform tags (manylinux2014 is 2.17, manylinux2010 2.12, manylinux1 2.5; pure-Python
 *  wheels need none). A wheel file names every tag it loads under; the lowest of them is its need. */
export function glibcNeeded(wheelFiles: readonly string[]): string {
  const legacy: Record<string, number> = { manylinux2014: 17, manylinux2010: 12, manylinux1: 5 };
  let need = GLIBC_MINOR.min;
  for (const file of wheelFiles) {
    const platforms =
      file
        .replace(/\.whl$/, '')
        .split('-')
        .pop() ?? '';
    const levels = platforms
      .split('.')
      .map((tag) => Number(/^manylinux_2_(\d+)_/.exec(tag)?.[1] ?? legacy[tag.replace(/_x86_64$|_aarch64$/, '')]))
      .filter((n) => Number.isFinite(n));
    if (levels.length) need = Math.max(need, Math.min(...levels));
  }
  return `2.${need}`;
}
