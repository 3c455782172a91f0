// The page's files: ui/public (the page and its ES modules, no build step) and uPlot's module and
// stylesheet. A fixed list made at start: a path not on it is a 404, so no request reaches another file.
import { readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Handler } from 'hono';

const PUBLIC = path.join(path.dirname(fileURLToPath(import.meta.url)), 'public');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

function publicFiles(dir: string, prefix = ''): Array<[string, string]> {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e): Array<[string, string]> => {
    const file = path.join(dir, e.name);
    if (e.isDirectory()) return publicFiles(file, `${prefix}/${e.name}`);
    return e.isFile() && TYPES[path.extname(e.name)] ? [[`${prefix}/${e.name}`, file]] : [];
  });
}

/** URL path → file. */
export function assetFiles(): Map<string, string> {
  const require = createRequire(import.meta.url);
  const files = new Map(publicFiles(PUBLIC));
  files.set('/', path.join(PUBLIC, 'index.html'));
  files.set('/vendor/uPlot.esm.js', require.resolve('uplot/dist/uPlot.esm.js'));
  files.set('/vendor/uPlot.min.css', require.resolve('uplot/dist/uPlot.min.css'));
  return files;
}

export function staticAssets(): Handler {
  const files = assetFiles();
  return async (c) => {
    const file = files.get(c.req.path);
    if (!file) return c.json({ error: `no page ${JSON.stringify(c.req.path)}` }, 404);
    return c.body(await readFile(file), 200, {
      'Content-Type': TYPES[path.extname(file)]!,
      'Cache-Control': 'no-cache',
    });
  };
}
