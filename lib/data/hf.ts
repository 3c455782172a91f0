// Hugging Face Hub download of a dataset's Parquet files (hiyouga/geometry3k by default). The file
// list comes from the Hub API; each file comes from its resolve URL. HF_ENDPOINT and HF_TOKEN are
// honoured as in huggingface_hub.
import { createWriteStream, promises as fs } from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import axios from 'axios';
import { z } from 'zod';
import { childLogger } from '../../base/log.js';

const log = childLogger('hf');

export const GEO3K_REPO = 'hiyouga/geometry3k';
const DEFAULT_ENDPOINT = 'https://huggingface.co';

export interface HubOptions {
  endpoint?: string;
  revision?: string;
  token?: string;
}

/** The Hub's base URL: opts.endpoint, else HF_ENDPOINT, else huggingface.co; anything but http(s) is refused by name. */
export function endpointOf(opts: HubOptions, env: NodeJS.ProcessEnv = process.env): string {
  const [source, raw] = opts.endpoint
    ? ['the endpoint', opts.endpoint]
    : env.HF_ENDPOINT
      ? ['HF_ENDPOINT', env.HF_ENDPOINT]
      : ['the default', DEFAULT_ENDPOINT];
  let url: URL | null = null;
  try {
    url = new URL(raw);
  } catch {
    /* reported below */
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw Object.assign(
      new Error(`${source}=${JSON.stringify(raw)} is not an http(s) URL (e.g. https://huggingface.co)`),
      { exitCode: 2 },
    );
  return raw.replace(/\/+$/, '');
}

function checkRepo(repo: string): void {
  if (!/^[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(repo) || repo.includes('..'))
    throw new Error(`bad dataset repo id: ${repo}`);
}

function encodePath(file: string): string {
  if (file.split('/').some((seg) => seg === '..' || seg === '.' || seg === ''))
    throw new Error(`bad file path in repo: ${file}`);
  return file.split('/').map(encodeURIComponent).join('/');
}

/** https://huggingface.co/datasets/<repo>/resolve/<revision>/<file> */
export function hfResolveUrl(repo: string, file: string, opts: HubOptions = {}): string {
  checkRepo(repo);
  return `${endpointOf(opts)}/datasets/${repo}/resolve/${encodeURIComponent(opts.revision ?? 'main')}/${encodePath(file)}`;
}

/** https://huggingface.co/api/datasets/<repo>/revision/<revision> — lists the repo's files. */
export function hfInfoUrl(repo: string, opts: HubOptions = {}): string {
  checkRepo(repo);
  return `${endpointOf(opts)}/api/datasets/${repo}/revision/${encodeURIComponent(opts.revision ?? 'main')}`;
}

const RepoInfo = z.looseObject({ siblings: z.array(z.looseObject({ rfilename: z.string() })) });

/** The Parquet files of a dataset repo listing, in a stable order. */
export function parquetFilesOf(info: unknown): string[] {
  const parsed = RepoInfo.parse(info);
  return parsed.siblings
    .map((s) => s.rfilename)
    .filter((f) => f.endsWith('.parquet'))
    .sort();
}

function authHeaders(opts: HubOptions): Record<string, string> {
  const token = opts.token ?? process.env.HF_TOKEN;
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** Downloads every Parquet file of `repo` under outDir, keeping the repo's paths; returns them. */
export async function downloadHfParquet(repo: string, outDir: string, opts: HubOptions = {}): Promise<string[]> {
  const info = await axios.get(hfInfoUrl(repo, opts), { headers: authHeaders(opts), timeout: 30_000 });
  const files = parquetFilesOf(info.data);
  if (files.length === 0) throw new Error(`${repo} has no .parquet files`);
  const written: string[] = [];
  for (const file of files) {
    const target = path.join(outDir, ...file.split('/'));
    await fs.mkdir(path.dirname(target), { recursive: true });
    const url = hfResolveUrl(repo, file, opts);
    log.info({ url, target }, 'downloading');
    const res = await axios.get(url, { responseType: 'stream', headers: authHeaders(opts), timeout: 120_000 });
    const tmp = `${target}.part`;
    await pipeline(res.data, createWriteStream(tmp));
    await fs.rename(tmp, target);
    written.push(target);
  }
  return written;
}
