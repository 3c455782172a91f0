// The JSON Schemas of the payloads the workflow sends the trainer (lib/contract.ts), exported by zod into
// a file that tests/python/test_contract_schema.py compares with the trainer's pydantic models
// (workers/trainer/contract.py), field by field: the two declarations are written by hand on each side,
// and only a comparison keeps them one contract. tests/ts/contract-schema.test.ts fails when the file is stale.
// Write it again: node --import tsx config/contract-schema.ts
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { SyncWeightsInput, TrainStepInput } from '../lib/contract.js';
import { REPO_ROOT } from '../base/paths.js';

export const CONTRACT_SCHEMA_FILE = path.join(REPO_ROOT, 'tests', 'fixtures', 'trainer-contract-schema.json');

/** What the trainer receives, by the name of the pydantic model that reads it. */
export const TRAINER_PAYLOADS = { TrainStepInput, SyncWeightsInput } as const;

/** The file's text: each payload's JSON Schema. io output: the type the workflow builds (z.infer), in
 *  which a field with a default is required, since the workflow sends every field the trainer uses. */
export function contractSchemaJson(): string {
  const schemas = Object.fromEntries(
    Object.entries(TRAINER_PAYLOADS).map(([name, schema]) => [name, z.toJSONSchema(schema, { io: 'output' })]),
  );
  return `${JSON.stringify(schemas, null, 2)}\n`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  writeFileSync(CONTRACT_SCHEMA_FILE, contractSchemaJson());
  console.log(`wrote ${path.relative(REPO_ROOT, CONTRACT_SCHEMA_FILE)}`);
}
