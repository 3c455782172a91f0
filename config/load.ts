// Loading the config tree. Precedence, lowest first:
//   1. defaults in config/schema.ts
//   2. the YAML file
//   3. environment, lowest first: the standard Temporal config file's profile under the standard
//      TEMPORAL_* variables (config/temporal-env.ts); TEMPO_RL_STATE_DIR, TEMPO_RL_MODEL /
//      TEMPO_RL_DATASET / TEMPO_RL_NUM_GPUS; TEMPO_RL__SECTION__KEY=value for any key (value parsed as YAML)
//   4. CLI flags: --set section.key=value (value parsed as YAML)
// Then the paths resolve: state_dir (default under XDG_STATE_HOME) and the task queues left empty
// (named after the state dir, config/schema.ts stackTaskQueue).
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { z } from 'zod';
import { blobStoreUri, parseBlobStoreUri } from '../stores/blobstore.js';
import { CONFIG_FILE, readBoundedText, UnreadableFile } from '../base/bounded-file.js';
import { redactEngineArgs } from './engine-args.js';
import { ConfigError, parseBoolVar, parserMessage } from './errors.js';
import { temporalEnvOverrides } from './temporal-env.js';

export { ConfigError, parseBoolVar, parserMessage };
import {
  REMOVED_KEYS,
  SECRET_KEYS,
  stackTaskQueue,
  TASK_QUEUE_BASES,
  TempoConfig,
  type TaskQueueKind,
} from './schema.js';

type Tree = Record<string, unknown>;

// Keys that would reach Object.prototype through a plain-object merge.
const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

function checkKey(key: string, where: string): void {
  if (FORBIDDEN_KEYS.has(key)) throw new ConfigError(`config: ${where}: the key ${JSON.stringify(key)} is not allowed`);
}

/** Refuses __proto__ and friends anywhere in a parsed YAML tree. */
function checkTreeKeys(value: unknown, where: string, trail: string[] = []): void {
  if (typeof value !== 'object' || value === null) return;
  for (const [k, v] of Object.entries(value)) {
    checkKey(k, `${where}: ${[...trail, k].join('.')}`);
    checkTreeKeys(v, where, [...trail, k]);
  }
}

function setPath(tree: Tree, keys: string[], value: unknown): void {
  for (const key of keys) checkKey(key, keys.join('.'));
  let node = tree;
  for (const key of keys.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Tree;
  }
  node[keys[keys.length - 1]!] = value;
}

function deepMerge(base: Tree, over: Tree): Tree {
  const out: Tree = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] =
      typeof v === 'object' &&
      v !== null &&
      !Array.isArray(v) &&
      typeof b === 'object' &&
      b !== null &&
      !Array.isArray(b)
        ? deepMerge(b as Tree, v as Tree)
        : v;
  }
  return out;
}

const INTEGER_TEXT = /^[-+]?[0-9]+$|^0o[0-7]+$|^0x[0-9a-fA-F]+$/;

/** The key path of a node of a YAML document (map keys, sequence indices). */
function keyPath(ancestors: readonly unknown[], node: unknown): string[] {
  const chain = [...ancestors, node];
  const keys: string[] = [];
  chain.forEach((n, i) => {
    if (YAML.isPair(n)) keys.push(String(YAML.isScalar(n.key) ? n.key.value : n.key));
    else if (YAML.isSeq(n)) keys.push(String(n.items.indexOf(chain[i + 1] as (typeof n.items)[number])));
  });
  return keys;
}

/**
 * Refuses a number written as a float (`1e3`, `1000.0`) where the schema wants an integer (a seed, a
 * port, a count): YAML reads both as 1000, but `1e3` for a seed is a typo or a guess, not a choice.
 * Integers are written as integers; the rule is the same in a file, a variable and --set.
 */
function checkIntegerText(doc: YAML.Document, base: readonly string[], where: string): void {
  YAML.visit(doc, {
    Scalar(key, node, ancestors) {
      if (
        key === 'key' ||
        typeof node.value !== 'number' ||
        node.source === undefined ||
        INTEGER_TEXT.test(node.source)
      )
        return;
      const keys = [...base, ...keyPath(ancestors, node)];
      if (!wantsInteger(keys)) return;
      // suggest the integer only where the key takes it (1e12 MiB is refused as too big anyway)
      const verdict = (schemaAt(keys) as z.ZodType | undefined)?.safeParse(node.value);
      const hint = !verdict?.success
        ? verdict
          ? `, and as a number it is refused: ${verdict.error.issues[0]?.message}`
          : ''
        : Number.isSafeInteger(node.value)
          ? `; write ${node.value}`
          : '';
      throw new ConfigError(
        `config: ${where}: ${keys.join('.')} is an integer, given ${node.source}, which is not written as one${hint}`,
      );
    },
  });
}

/** A value from a variable or --set, read as YAML (`hot` stays a string, `[1, 2]` is a list). Empty is
 *  the empty string (not YAML's null, which no key takes): `--set model.path=` means "the default". */
function parseValue(raw: string, keys: readonly string[], where: string): unknown {
  if (raw === '') return '';
  const doc = YAML.parseDocument(raw);
  if (doc.errors.length > 0) return raw;
  checkIntegerText(doc, keys, where);
  return doc.toJS();
}

/** The environment's contribution, as a partial tree. */
export function envOverrides(env: NodeJS.ProcessEnv): Tree {
  const tree: Tree = temporalEnvOverrides(env);
  const direct: Array<[string, string[], (v: string) => unknown]> = [
    ['TEMPO_RL_STATE_DIR', ['state_dir'], String],
    ['TEMPO_RL_MODEL', ['model', 'path'], String],
    ['TEMPO_RL_DATASET', ['dataset', 'path'], String],
    ['TEMPO_RL_NUM_GPUS', ['model', 'num_gpus'], (v) => parseValue(v, ['model', 'num_gpus'], `TEMPO_RL_NUM_GPUS=${v}`)],
  ];
  for (const [name, keys, conv] of direct) {
    const v = env[name];
    if (v !== undefined && v !== '') setPath(tree, keys, conv(v));
  }
  for (const [name, v] of Object.entries(env)) {
    if (!name.startsWith('TEMPO_RL__') || v === undefined) continue;
    const keys = name.slice('TEMPO_RL__'.length).toLowerCase().split('__');
    setPath(tree, keys, parseValue(v, keys, `${name}=${v}`));
  }
  return tree;
}

/** `--set a.b=value` flags as a partial tree. */
export function setOverrides(sets: readonly string[]): Tree {
  const tree: Tree = {};
  for (const s of sets) {
    const eq = s.indexOf('=');
    if (eq <= 0) throw new ConfigError(`config: --set ${JSON.stringify(s)}: expected key.path=value`);
    const keys = s.slice(0, eq).split('.');
    setPath(tree, keys, parseValue(s.slice(eq + 1), keys, `--set ${s}`));
  }
  return tree;
}

function typeName(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string') return `the string ${JSON.stringify(v)}`;
  if (typeof v === 'object') return 'an object';
  return `${typeof v} ${String(v)}`;
}

/** What a value is, never what it says: for secrets (SECRET_KEYS) and for a whole file's contents. */
function kindOf(v: unknown): string {
  if (typeof v === 'string') return `a string of ${v.length} characters (not shown)`;
  if (v === null || v === undefined || Array.isArray(v) || typeof v === 'object') return typeName(v);
  return `a ${typeof v} (not shown)`;
}

function valueAt(tree: unknown, keys: readonly PropertyKey[]): unknown {
  let node = tree;
  for (const k of keys) node = (node as Record<PropertyKey, unknown> | undefined)?.[k];
  return node;
}

function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length]![b.length]!;
}

/** A schema without its default, prefault and optional wrappers (an array stays an array). */
function unwrapped(s: unknown): unknown {
  while (
    s &&
    typeof s === 'object' &&
    !(s instanceof z.ZodArray) &&
    'unwrap' in s &&
    typeof (s as { unwrap: unknown }).unwrap === 'function'
  )
    s = (s as { unwrap(): unknown }).unwrap();
  return s;
}

/** The schema of the key at `keys` (an index steps into an array), or undefined for no such key. */
function schemaAt(keys: readonly PropertyKey[]): unknown {
  let s = unwrapped(TempoConfig);
  for (const k of keys) {
    if (s instanceof z.ZodArray) {
      if (!/^\d+$/.test(String(k))) return undefined;
      s = unwrapped(s.element);
      continue;
    }
    const shape = (s as { shape?: Record<string, unknown> } | undefined)?.shape;
    if (!shape || !Object.hasOwn(shape, String(k))) return undefined;
    const next = shape[String(k)];
    s = unwrapped(next);
  }
  return s;
}

function knownKeys(keys: readonly PropertyKey[]): string[] {
  return Object.keys((schemaAt(keys) as { shape?: object } | undefined)?.shape ?? {});
}

function wantsInteger(keys: readonly PropertyKey[]): boolean {
  const s = schemaAt(keys);
  return s instanceof z.ZodNumber && s.format === 'safeint';
}

/** The known key a misspelled one most likely meant, if it is near enough: within a third of the
 *  key's length (at least 1, at most 3 edits), so a one-letter key suggests nothing far from it. */
function nearestKey(key: string, known: readonly string[]): string | undefined {
  const near = [...known].sort((a, b) => distance(key, a) - distance(key, b))[0];
  const allowed = Math.min(3, Math.max(1, Math.floor(key.length / 3)));
  return near !== undefined && distance(key, near) <= allowed ? near : undefined;
}

export function formatIssues(error: z.ZodError, given: unknown, source: string): string {
  const lines = error.issues.map((issue) => {
    const where = issue.path.join('.') || '(top level)';
    if (issue.code === 'unrecognized_keys') {
      return issue.keys
        .map((key) => {
          const full = [...issue.path, key].join('.');
          const removed = REMOVED_KEYS[full];
          const near = removed ? undefined : nearestKey(key, knownKeys(issue.path));
          const hint = removed ? ` — ${removed}` : near ? ` — did you mean "${near}"?` : '';
          return `  ${full}: unknown key${hint}`;
        })
        .join('\n');
    }
    const value = valueAt(given, issue.path);
    const secret = SECRET_KEYS.has(String(issue.path[issue.path.length - 1]));
    // `--set engines.extra_args=["--max-num-seqs", 8]`: YAML reads 8 as a number
    const quote =
      issue.code === 'invalid_type' && issue.expected === 'string' && typeof value === 'number'
        ? ` (write it in quotes${secret ? '' : `, "${value}"`}: a bare number is read as a number)`
        : '';
    return `  ${where}: ${issue.message}; given ${secret ? kindOf(value) : typeName(value)}${quote}`;
  });
  return `config error (${source}):\n${lines.join('\n')}`;
}

export interface LoadOptions {
  file?: string;
  env?: NodeJS.ProcessEnv;
  sets?: readonly string[];
}

export function readYamlFile(file: string, warn: (msg: string) => void = (m) => process.stderr.write(`${m}\n`)): Tree {
  let text: string;
  try {
    text = readBoundedText(file, CONFIG_FILE);
  } catch (err) {
    if (err instanceof UnreadableFile) throw new ConfigError(`config: ${err.message}`);
    throw err;
  }
  const doc = YAML.parseDocument(text);
  if (doc.errors.length > 0)
    throw new ConfigError(`config: ${file} is not valid YAML: ${parserMessage(doc.errors[0])}`);
  checkIntegerText(doc, [], file);
  const tree: unknown = doc.toJS();
  if (tree === null || tree === undefined) {
    warn(`config: ${file} is empty; using the defaults`);
    return {};
  }
  // What it is, not what it says: a file given by mistake (a key, a token) must not be echoed.
  if (typeof tree !== 'object' || Array.isArray(tree))
    throw new ConfigError(`config: ${file}: expected a mapping at the top level, given ${kindOf(tree)}`);
  checkTreeKeys(tree, file);
  return tree as Tree;
}

/** Checks across sections (each section checks its own keys in config/schema.ts). */
const CheckedConfig = TempoConfig.superRefine((cfg, ctx) => {
  const keep = cfg.run.keep_checkpoints;
  if (keep !== 0 && keep <= cfg.run.steps_per_workflow_run)
    ctx.addIssue({
      code: 'custom',
      path: ['run', 'keep_checkpoints'],
      message: `must be 0 or more than run.steps_per_workflow_run (${cfg.run.steps_per_workflow_run}): a resumed run may redo that many committed steps, and needs their weights`,
    });
  if (cfg.run.keep_checkpoint_every > 0 && keep === 0)
    ctx.addIssue({
      code: 'custom',
      path: ['run', 'keep_checkpoint_every'],
      message: 'needs run.keep_checkpoints > 0 (0 keeps every checkpoint already)',
    });
  if (cfg.run.keep_checkpoint_every > 0 && cfg.run.keep_checkpoint_every % cfg.run.checkpoint_interval !== 0)
    ctx.addIssue({
      code: 'custom',
      path: ['run', 'keep_checkpoint_every'],
      message: `must be a multiple of run.checkpoint_interval (${cfg.run.checkpoint_interval}): only those steps have full checkpoints`,
    });
  if (cfg.model.num_gpus > 1 && cfg.run.trainer_standbys > 0)
    ctx.addIssue({
      code: 'custom',
      path: ['run', 'trainer_standbys'],
      message: `must be 0 when model.num_gpus is above 1 (${cfg.model.num_gpus}): a data-parallel trainer is one torchrun group, and standby groups are not implemented; set run.trainer_standbys=0`,
    });
  if (cfg.run.eval_at_start && cfg.run.eval_interval === 0)
    ctx.addIssue({
      code: 'custom',
      path: ['run', 'eval_at_start'],
      message: 'needs run.eval_interval > 0 (eval is off)',
    });
  if (cfg.engines.max_model_len < cfg.rollout.max_context_len)
    ctx.addIssue({
      code: 'custom',
      path: ['engines', 'max_model_len'],
      message: `must be at least rollout.max_context_len (${cfg.rollout.max_context_len}): the engines must hold a whole episode`,
    });
});

/** The merged tree, checked; a ConfigError naming `source` (where the values came from) if it is not valid. */
function checked(merged: Tree, source: string): TempoConfig {
  const parsed = CheckedConfig.safeParse(merged);
  if (!parsed.success) throw new ConfigError(formatIssues(parsed.error, merged, source));
  return parsed.data;
}

export function loadConfig(opts: LoadOptions = {}): TempoConfig {
  const env = opts.env ?? process.env;
  const fromFile = opts.file ? readYamlFile(opts.file) : {};
  const merged = deepMerge(deepMerge(fromFile, envOverrides(env)), setOverrides(opts.sets ?? []));
  const source = [opts.file ?? 'defaults', 'environment', opts.sets?.length ? '--set flags' : '']
    .filter(Boolean)
    .join(' + ');
  const cfg = checked(merged, source);
  if (!cfg.state_dir) cfg.state_dir = defaultStateDir(env);
  cfg.state_dir = path.resolve(cfg.state_dir);
  // Canonical, so a relative path means the same to every process that receives the plan.
  if (cfg.blobs.uri) cfg.blobs.uri = blobStoreUri(parseBlobStoreUri(cfg.blobs.uri));
  const queues = cfg.temporal.task_queues;
  for (const kind of Object.keys(TASK_QUEUE_BASES) as TaskQueueKind[])
    queues[kind] ||= stackTaskQueue(kind, cfg.state_dir);
  return cfg;
}

/** A loaded config with `--set`-style overrides (key.path=value) applied and checked again. */
export function withSets(cfg: TempoConfig, sets: readonly string[]): TempoConfig {
  return checked(deepMerge(cfg as unknown as Tree, setOverrides(sets)), '--set flags');
}

export function defaultStateDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_STATE_HOME || path.join(env.HOME || os.homedir(), '.local', 'state');
  return path.join(base, 'tempo-rl');
}

/** The resolved config with secrets replaced, for printing (an --api-key in engines.extra_args too). */
export function redact(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redact);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      SECRET_KEYS.has(k) && v ? '***' : k === 'extra_args' && Array.isArray(v) ? redactEngineArgs(v) : redact(v),
    ]),
  );
}
