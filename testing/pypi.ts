// Whether PyPI answers from here: the pack tests that resolve real wheels skip, saying why, where not.
import { spawnSync } from 'node:child_process';

/** null when PyPI answers; else why the tests that need it skip. */
export function pypiUnreachable(): string | null {
  const probe = spawnSync(
    'python3',
    ['-c', "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/six/', timeout=5)"],
    { encoding: 'utf8', timeout: 15_000 },
  );
  return probe.status === 0
    ? null
    : `PyPI is unreachable from here (${(probe.stderr ?? '').trim().split('\n').pop() || 'timed out'})`;
}
