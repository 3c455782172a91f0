// docs/configuration.md's tables of keys follow the config schema (config/config-doc.ts): the doc is
// what the generator writes today, every key of the tree has a row, and a table that drifts is
// written again with its meanings kept. Reads files only.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  CONFIG_DOC_FILE,
  configDocText,
  configLeaves,
  defaultText,
  REGENERATE_CONFIG_DOC,
  typeText,
} from '../../config/config-doc.js';

const doc = readFileSync(CONFIG_DOC_FILE, 'utf8');

/** A doc of one table, as a human would write or leave it. */
const table = (section: string, ...rows: string[]) =>
  [
    '# Keys',
    '',
    `<!-- generated:config-table section=${section} -->`,
    '| key | default | meaning |',
    '| --- | --- | --- |',
    ...rows,
    '<!-- /generated -->',
    '',
    'Prose after the table.',
    '',
  ].join('\n');

test('docs/configuration.md is what config/config-doc.ts writes from config/schema.ts', () => {
  assert.equal(
    doc,
    configDocText(doc),
    `docs/configuration.md drifted from the config schema: run ${REGENERATE_CONFIG_DOC}`,
  );
});

test('every key of the config tree has a row in one of the doc’s tables', () => {
  const rows = [...doc.matchAll(/<!-- generated:config-table section=([\w.-]+) -->([\s\S]*?)<!-- \/generated -->/g)];
  const named = rows.flatMap(([, section, body]) =>
    body!
      .split('\n')
      .filter((l) => l.startsWith('| `'))
      .flatMap((l) => [...l.split(' | ')[0]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!))
      .map((key) => (section === 'top-level' ? key : `${section}.${key}`)),
  );
  assert.deepEqual([...named].sort(), [...configLeaves().keys()].sort());
});

test('a drifted table is written again: type and default from the schema, the meaning kept, a missing key added', () => {
  const drifted = table('server', '| `port` | 1234 | the frontend \\| its port |', '| `ip` | `0.0.0.0` | |');
  const written = configDocText(drifted);
  assert.match(written, /\| `port` \| 1 ≤ integer ≤ 65535 \| 7233 \| the frontend \\\| its port \|/);
  assert.match(written, /\| `ip` \| string \| `127\.0\.0\.1` \| \|/);
  assert.match(
    written,
    /\| `ui_port` \| 1 ≤ integer ≤ 65535 \| 8233 \| \|\n\n<!-- \/generated -->\n\nProse after the table\.\n$/,
  );
  assert.equal(configDocText(written), written, 'a second run changes nothing');
});

test('a row that names a key the schema lacks, or a key twice, or a table of no section, is refused', () => {
  assert.throws(
    () => configDocText(table('server', '| `host` | x | the address |')),
    /section=server, row `host`: config\/schema\.ts has no such key/,
  );
  assert.throws(
    () => configDocText(table('grpo', '| `kl.coef`, `lr` | 0 | |', '| `lr` | 1e-6 | |')),
    /row `lr`: the key is in two rows/,
  );
  assert.throws(
    () => configDocText(table('rollot', '| `seed` | 0 | |')),
    /section=rollot: config\/schema\.ts has no such section/,
  );
});

test('types and defaults read as the doc writes them', () => {
  assert.equal(typeText({ type: 'integer', exclusiveMinimum: 0, maximum: 2 ** 24 }), '1 ≤ integer ≤ 16 777 216');
  assert.equal(typeText({ type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER }), 'integer ≥ 0');
  assert.equal(typeText({ type: 'number', exclusiveMinimum: 0, maximum: 1 }), '0 < number ≤ 1');
  assert.equal(typeText({ anyOf: [{ type: 'string', const: 'auto' }, { type: 'boolean' }] }), '`auto` \\| boolean');
  assert.equal(typeText({ type: 'array', items: { type: 'string', format: 'uri' } }), 'list of URL');
  assert.deepEqual([1e-6, 0.05, 16_000_000, '', 'x', [], undefined].map(defaultText), [
    '1e-6',
    '0.05',
    '16 000 000',
    'empty',
    '`x`',
    '`[]`',
    'absent',
  ]);
});
