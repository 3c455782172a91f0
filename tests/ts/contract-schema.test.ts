// The zod side of the trainer's contract as tests/python/test_contract_schema.py reads it: the
// checked-in JSON Schemas are what config/contract-schema.ts writes today, and every field the trainer
// uses is one the workflow must send (a default of the trainer's own would shadow the config's).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { z } from 'zod';
import { CONTRACT_SCHEMA_FILE, contractSchemaJson, TRAINER_PAYLOADS } from '../../config/contract-schema.js';

test('the checked-in JSON Schemas of the trainer payloads are what config/contract-schema.ts writes', () => {
  assert.equal(
    readFileSync(CONTRACT_SCHEMA_FILE, 'utf8'),
    contractSchemaJson(),
    'stale: run node --import tsx config/contract-schema.ts',
  );
});

test('the workflow sends every field of a train step and a weight sync, but the colocated engines’ own', () => {
  const optional = Object.fromEntries(
    Object.entries(TRAINER_PAYLOADS).map(([name, schema]) => {
      const json = z.toJSONSchema(schema, { io: 'output' });
      const required = new Set(json.required ?? []);
      return [name, Object.keys(json.properties ?? {}).filter((key) => !required.has(key))];
    }),
  );
  assert.deepEqual(optional, { TrainStepInput: ['sleep_engines', 'engine_sleep_level'], SyncWeightsInput: [] });
});
