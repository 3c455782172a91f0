// docs/configuration.md's tables of keys, generated from the config tree (config/schema.ts) so that a
// key, its type or its default cannot drift from the schema. zod's JSON Schema export gives the key,
// type and default columns; the meaning column is the doc's own prose, kept by key, since the schema's
// comments are not reachable at run time. Each table sits between
//   <!-- generated:config-table section=SECTION --> and <!-- /generated -->
// (SECTION a dotted path of the tree, or top-level for the keys outside any section). A table lists the
// leaves under its section, nested objects flattened (tls.enabled), except those with a table of their
// own; a row may group keys (`eps_clip`, `eps_clip_high`). A key the schema gains is appended with an
// empty meaning; a row naming a key the schema lacks is an error, so no prose is dropped unseen.
// tests/ts/config-doc.test.ts fails when the doc drifts. Write it again: node --import tsx config/config-doc.ts
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { REPO_ROOT } from '../base/paths.js';
import { TempoConfig } from './schema.js';

export const CONFIG_DOC_FILE = path.join(REPO_ROOT, 'docs', 'configuration.md');
export const REGENERATE_CONFIG_DOC = 'node --import tsx config/config-doc.ts';
export const TOP_LEVEL = 'top-level';
const TABLE = /(<!-- generated:config-table section=([\w.-]+) -->\n)([\s\S]*?)(<!-- \/generated -->)/g;
const HEADER = ['key', 'type', 'default', 'meaning'];

interface JsonSchema {
  type?: string;
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  format?: string;
  minLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
}

/** A leaf of the tree: its accepted values (input side: a path key is the string given, not the
 *  resolved one) and its default, which zod writes on the output side only for transformed keys. */
interface Leaf {
  input: JsonSchema;
  default: unknown;
}

/** Every leaf of the config tree by its dotted path; objects with properties are descended (a record
 *  such as python_env.args is a leaf). */
export function configLeaves(): Map<string, Leaf> {
  const input = z.toJSONSchema(TempoConfig, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
  const output = z.toJSONSchema(TempoConfig, { io: 'output', unrepresentable: 'any' }) as JsonSchema;
  const leaves = new Map<string, Leaf>();
  const walk = (inNode: JsonSchema, outNode: JsonSchema | undefined, prefix: string) => {
    for (const [key, child] of Object.entries(inNode.properties ?? {})) {
      const outChild = outNode?.properties?.[key];
      if (child.properties) walk(child, outChild, `${prefix}${key}.`);
      else leaves.set(`${prefix}${key}`, { input: child, default: child.default ?? outChild?.default });
    }
  };
  walk(input, output, '');
  return leaves;
}

/** A number as the doc writes it: small ones in exponent form, large ones grouped by thousands. */
function numberText(n: number): string {
  if (n !== 0 && Math.abs(n) < 1e-3) return n.toExponential();
  if (Number.isInteger(n) && Math.abs(n) >= 1e6) return n.toString().replace(/\B(?=(\d{3})+$)/g, ' ');
  return String(n);
}

function literalText(v: unknown): string {
  if (typeof v === 'string') return `\`${v}\``;
  if (typeof v === 'number') return numberText(v);
  return String(v);
}

/** A number and its bounds: 1 ≤ integer ≤ 256, number > 0, integer ≥ 0 (zod's safe-integer range is no bound). */
function boundedText(s: JsonSchema): string {
  const name = s.type === 'integer' ? 'integer' : 'number';
  // an integer above n is one of at least n + 1
  const [low, strict] =
    s.exclusiveMinimum === undefined
      ? [s.minimum !== undefined && s.minimum > Number.MIN_SAFE_INTEGER ? s.minimum : undefined, false]
      : name === 'integer'
        ? [s.exclusiveMinimum + 1, false]
        : [s.exclusiveMinimum, true];
  const high = s.maximum !== undefined && s.maximum < Number.MAX_SAFE_INTEGER ? s.maximum : undefined;
  if (low === undefined) return high === undefined ? name : `${name} ≤ ${numberText(high)}`;
  if (high === undefined) return `${name} ${strict ? '>' : '≥'} ${numberText(low)}`;
  return `${numberText(low)} ${strict ? '<' : '≤'} ${name} ≤ ${numberText(high)}`;
}

/** What a key takes, as one table cell (alternatives joined by an escaped pipe). */
export function typeText(s: JsonSchema): string {
  if (s.anyOf) return s.anyOf.map(typeText).join(' \\| ');
  if (s.const !== undefined) return literalText(s.const);
  if (s.enum) return s.enum.map(literalText).join(' \\| ');
  if (s.type === 'integer' || s.type === 'number') return boundedText(s);
  if (s.type === 'array') return `list of ${typeText(s.items ?? {})}`;
  if (s.type === 'object') return 'mapping';
  if (s.type === 'string') return s.format === 'uri' ? 'URL' : s.minLength ? 'non-empty string' : 'string';
  return s.type ?? 'any';
}

/** A default as one table cell; a key without one is absent (its meaning says what that does). */
export function defaultText(v: unknown): string {
  if (v === undefined) return 'absent';
  if (v === '') return 'empty';
  if (typeof v === 'object' && v !== null) return `\`${JSON.stringify(v)}\``;
  return literalText(v);
}

/** The cells of a table row, split at pipes that are not escaped, trimmed. */
function cells(line: string): string[] {
  return line
    .trim()
    .replace(/^\|/, '')
    .replace(/\|$/, '')
    .split(/(?<!\\)\|/)
    .map((c) => c.trim());
}

interface Row {
  keys: string[];
  meaning: string;
}

/** The rows of a table as the doc has them: the keys of its key column and the text of its meaning
 *  column (found by header, so a table without one reads as empty meanings). */
function readRows(body: string): Row[] {
  const lines = body.split('\n').filter((l) => l.trim().startsWith('|'));
  if (lines.length < 2) return [];
  const header = cells(lines[0]!);
  const keyAt = header.indexOf('key');
  const meaningAt = header.indexOf('meaning');
  return lines.slice(2).map((line) => {
    const row = cells(line);
    return {
      keys: [...(row[keyAt] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1]!),
      meaning: meaningAt < 0 ? '' : (row[meaningAt] ?? ''),
    };
  });
}

/** Each grouped key's cell, once when they agree. */
const joined = (texts: string[]) => (texts.every((t) => t === texts[0]) ? texts[0]! : texts.join(', '));

/** A section's table: the doc's rows in its order, their key cells checked and their type and default
 *  cells from the schema, then a row for each key of the section that no row names. */
function renderTable(section: string, current: string, keys: Map<string, Leaf>): string {
  const rows = readRows(current);
  const named = new Set<string>();
  for (const key of rows.flatMap((r) => r.keys)) {
    const where = `docs/configuration.md, table section=${section}, row \`${key}\``;
    if (!keys.has(key))
      throw new Error(`${where}: config/schema.ts has no such key here; rename the row or remove it by hand`);
    if (named.has(key)) throw new Error(`${where}: the key is in two rows; keep one`);
    named.add(key);
  }
  for (const key of keys.keys()) if (!named.has(key)) rows.push({ keys: [key], meaning: '' });
  const line = (texts: string[]) => `| ${texts.join(' | ')} |`.replace(/ {2}\|$/, ' |');
  const body = rows.map((r) => {
    const leaves = r.keys.map((k) => keys.get(k)!);
    return line([
      r.keys.map((k) => `\`${k}\``).join(', '),
      joined(leaves.map((l) => typeText(l.input))),
      joined(leaves.map((l) => defaultText(l.default))),
      r.meaning,
    ]);
  });
  return [line(HEADER), line(HEADER.map(() => '---')), ...body].join('\n');
}

/** The section a leaf belongs to: the longest section its path is under, else the top level. */
function sectionOf(leafPath: string, sections: string[]): string {
  const under = sections.filter((s) => s !== TOP_LEVEL && leafPath.startsWith(`${s}.`));
  return under.sort((a, b) => b.length - a.length)[0] ?? TOP_LEVEL;
}

/** The doc with every generated table written again from the schema; the rest of the text untouched. */
export function configDocText(doc: string, leaves: Map<string, Leaf> = configLeaves()): string {
  const sections = [...doc.matchAll(TABLE)].map((m) => m[2]!);
  const bySection = new Map<string, Map<string, Leaf>>(sections.map((s) => [s, new Map()]));
  for (const [leafPath, leaf] of leaves) {
    const section = sectionOf(leafPath, sections);
    const relative = section === TOP_LEVEL ? leafPath : leafPath.slice(section.length + 1);
    bySection.get(section)?.set(relative, leaf);
  }
  for (const [section, keys] of bySection)
    if (keys.size === 0 && section !== TOP_LEVEL)
      throw new Error(`docs/configuration.md, table section=${section}: config/schema.ts has no such section`);
  return doc.replace(
    TABLE,
    (_all, begin: string, section: string, body: string, end: string) =>
      `${begin}\n${renderTable(section, body, bySection.get(section)!)}\n\n${end}`,
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const before = readFileSync(CONFIG_DOC_FILE, 'utf8');
  const after = configDocText(before);
  if (after !== before) writeFileSync(CONFIG_DOC_FILE, after);
  console.log(`${path.relative(REPO_ROOT, CONFIG_DOC_FILE)}: ${after === before ? 'up to date' : 'written'}`);
}
