// The trainer's hyper-parameter defaults, generated from their one declaration (config/grpo.ts, through
// lib/contract.ts TrainHyper) into a JSON file the Python contract reads (workers/trainer/contract.py
// Hyper). The workflow sends every field, so these fill in only for callers that give a few: the
// trainer's own tests and benches. tests/ts/contract.test.ts fails when the file is stale.
// Write it again: node --import tsx config/hyper-defaults.ts
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { TrainHyper } from '../lib/contract.js';
import { REPO_ROOT } from '../base/paths.js';

export const HYPER_DEFAULTS_FILE = path.join(REPO_ROOT, 'workers', 'trainer', 'hyper_defaults.json');

/** The file's text: every field of TrainHyper with its default. */
export function hyperDefaultsJson(): string {
  return `${JSON.stringify(TrainHyper.parse({}), null, 2)}\n`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  writeFileSync(HYPER_DEFAULTS_FILE, hyperDefaultsJson());
  console.log(`wrote ${path.relative(REPO_ROOT, HYPER_DEFAULTS_FILE)}`);
}
