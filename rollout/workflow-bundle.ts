// The workflow bundle, built once per source and kept in the cache: a restarted rollout worker (or
// a test's) loads it instead of running webpack again (~1.5 s of its start-up on 2 cores).
// The key hashes every TypeScript source the workflows could import (workflows/, protocol/, lib/,
// activities/, config/), the lock file and the SDK version, so any change that could reach the bundle builds a new one.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import { cacheDir, REPO_ROOT } from '../base/paths.js';

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sources(p) : e.name.endsWith('.ts') ? [p] : [];
  });
}

/** `workflowsPath`: the bundle's entry; its own folder's sources count too (the tests' bundle lives
 *  under testing). */
export function workflowBundleKey(workflowsPath: string): string {
  const h = createHash('sha256');
  const dirs = [
    ...new Set([
      ...['workflows', 'protocol', 'lib', 'engine', 'config', 'base'].map((d) => path.join(REPO_ROOT, d)),
      path.dirname(workflowsPath),
    ]),
  ];
  const files = [...new Set([...dirs.flatMap(sources), path.join(REPO_ROOT, 'package-lock.json')])].sort();
  h.update(path.relative(REPO_ROOT, workflowsPath)).update('\0');
  for (const f of files) h.update(path.relative(REPO_ROOT, f)).update('\0').update(readFileSync(f)).update('\0');
  h.update(
    JSON.parse(readFileSync(path.join(REPO_ROOT, 'node_modules', '@temporalio', 'worker', 'package.json'), 'utf8'))
      .version,
  );
  return h.digest('hex').slice(0, 16);
}

/** The bundle's path for the workflows at `workflowsPath`, built first when the cache has none. */
export async function cachedWorkflowBundle(workflowsPath: string): Promise<{ codePath: string }> {
  const dir = path.join(cacheDir(), 'workflow-bundles');
  const codePath = path.join(dir, `${workflowBundleKey(workflowsPath)}.js`);
  if (!existsSync(codePath)) {
    const { code } = await bundleWorkflowCode({ workflowsPath, ignoreModules: [] });
    mkdirSync(dir, { recursive: true });
    const tmp = `${codePath}.tmp-${process.pid}`;
    writeFileSync(tmp, code);
    renameSync(tmp, codePath);
  }
  return { codePath };
}
