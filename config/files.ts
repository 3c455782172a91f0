// The files and folders a config names, checked by `config check` where it runs, so that a wrong path
// fails there and not once the stack is up. Two severities:
//   error    the path cannot work: a TLS file (read by every command that connects, from this host)
//            that is missing, or any named path that exists but is the wrong kind of thing (a
//            directory for a file, a FIFO or a device, which a reader would wait on or read forever);
//   warning  a data file that is not there yet: a dataset or sft.path may be written later (`data
//            download`, `data sft-transcripts`, the demo) or live only on the worker hosts.
import { statSync, type Stats } from 'node:fs';
import path from 'node:path';
import { fileKind } from '../base/bounded-file.js';
import { resolveSplitFiles } from '../lib/data/load.js';
import type { TempoConfig } from './schema.js';

export interface FileFinding {
  severity: 'error' | 'warning';
  /** The config key, e.g. temporal.tls.client_cert_path. */
  key: string;
  path: string;
  problem: string;
}

function statOrNull(p: string): Stats | null {
  try {
    return statSync(p);
  } catch {
    return null;
  }
}

/** What is wrong with `p` as a `want`, or null; `missing` is the severity of a path that is not there. */
function checkPath(
  key: string,
  p: string,
  want: 'file' | 'folder',
  missing: FileFinding['severity'],
): FileFinding | null {
  const abs = path.resolve(p);
  const st = statOrNull(abs);
  if (!st) return { severity: missing, key, path: abs, problem: `no such ${want}` };
  const ok = want === 'file' ? st.isFile() : st.isDirectory();
  return ok
    ? null
    : {
        severity: 'error',
        key,
        path: abs,
        problem: `is ${fileKind(st)}, not ${want === 'file' ? 'a regular file' : 'a folder'}`,
      };
}

function tlsFindings(cfg: TempoConfig): FileFinding[] {
  const tls = cfg.temporal.tls;
  const paths = {
    client_cert_path: tls.client_cert_path,
    client_key_path: tls.client_key_path,
    server_ca_cert_path: tls.server_ca_cert_path,
  };
  return Object.entries(paths)
    .filter(([, p]) => p !== '')
    .map(([k, p]) => checkPath(`temporal.tls.${k}`, p, 'file', 'error'))
    .filter((f) => f !== null);
}

/** Each split's files as the loader finds them (lib/data/load.ts resolveSplitFiles: `{split}` in the
 *  path, or the split's files in a folder): missing is a warning, a folder without them an error. */
async function datasetFindings(cfg: TempoConfig): Promise<FileFinding[]> {
  const d = cfg.dataset;
  if (d.kind === 'synthetic') return [];
  if (d.path === '')
    return [{ severity: 'error', key: 'dataset.path', path: '', problem: `is required for dataset.kind ${d.kind}` }];
  const out: FileFinding[] = [];
  for (const split of new Set([d.train_split, d.eval_split])) {
    const p = path.resolve(d.path.replaceAll('{split}', split));
    const st = statOrNull(p);
    const of = ` (split ${JSON.stringify(split)})`;
    if (!st) out.push({ severity: 'warning', key: 'dataset.path', path: p, problem: `no such file or folder${of}` });
    else if (!st.isFile() && !st.isDirectory())
      out.push({
        severity: 'error',
        key: 'dataset.path',
        path: p,
        problem: `is ${fileKind(st)}, not a file or a folder${of}`,
      });
    else if (st.isDirectory()) {
      const files = await resolveSplitFiles(d, split).catch((err: Error) => {
        out.push({ severity: 'error', key: 'dataset.path', path: p, problem: err.message });
        return [];
      });
      for (const bad of files.map((f) => checkPath('dataset.path', f, 'file', 'error')))
        if (bad) out.push({ ...bad, problem: bad.problem + of });
    }
  }
  for (const [i, root] of d.image_roots.entries()) {
    const bad = checkPath(`dataset.image_roots.${i}`, root, 'folder', 'warning');
    if (bad) out.push(bad);
  }
  return out;
}

function sftFindings(cfg: TempoConfig): FileFinding[] {
  if (cfg.algorithm !== 'sft') return [];
  const bad = checkPath('sft.path', cfg.sft.path, 'file', 'warning');
  return bad ? [bad] : [];
}

/** What `config check` can tell of the files the config names, from this host. */
export async function configFileFindings(cfg: TempoConfig): Promise<FileFinding[]> {
  return [...tlsFindings(cfg), ...sftFindings(cfg), ...(await datasetFindings(cfg))];
}

export function describeFinding(f: FileFinding): string {
  const where = f.path ? `${f.key} ${JSON.stringify(f.path)}` : f.key;
  return `${where}: ${f.problem}${f.severity === 'warning' ? ' (a run needs it when it starts)' : ''}`;
}
