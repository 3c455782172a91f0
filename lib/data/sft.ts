// SFT export: one JSONL line per prompt, the final assistant turn being "Answer: \boxed{…}".
// Images are written as absolute paths of the stored PNGs (the LLaMA-Factory / ShareGPT layout).
import type { ToolSpec } from '../../engine/types.js';
import path from 'node:path';
import type { BlobStore } from '../../stores/blobstore.js';
import { localBlobPath } from '../blob-store-config.js';
import { readPrefix } from '../../base/bounded-file.js';
import { type OwnOutput, writeOutputFile } from '../../base/out-path.js';
import { labelToLatex } from '../math/to-latex.js';
import { DEFAULT_ENVIRONMENT, getEnvironment } from '../env/registry.js';
import type { PromptRow } from './rows.js';

/** One SFT example: "<image>" in a message stands for the next of `images`; `tools` are offered as in a rollout. */
export interface SftRecord {
  id: string;
  messages: Array<{ role: 'system' | 'user' | 'assistant' | 'tool'; content: string }>;
  images: string[];
  tools?: ToolSpec[];
}

export function sftAnswer(label: string): string {
  return `Answer: \\boxed{${labelToLatex(label)}}`;
}

/** The prompt is the environment's single-turn one (rollout.environment; default geo3k). */
export function sftRecord(
  row: PromptRow,
  store: BlobStore,
  systemPrompt?: string,
  environment = DEFAULT_ENVIRONMENT,
): SftRecord {
  const { messages } = getEnvironment(environment).prompt(row, { systemPrompt, tools: false });
  const flat = messages.map((m) => ({
    role: m.role as 'system' | 'user',
    content:
      typeof m.content === 'string' || m.content === null
        ? (m.content ?? '')
        : m.content.map((p) => (p.type === 'text' ? p.text : '<image>')).join(''),
  }));
  return {
    id: row.id,
    messages: [...flat, { role: 'assistant', content: sftAnswer(row.answer) }],
    images: row.images.map((ref) => localBlobPath(store, ref, 'an SFT JSONL export')),
  };
}

export async function writeSftJsonl(
  rows: PromptRow[],
  store: BlobStore,
  outFile: string,
  systemPrompt?: string,
  environment = DEFAULT_ENVIRONMENT,
): Promise<number> {
  return writeSftRecords(
    rows.map((row) => sftRecord(row, store, systemPrompt, environment)),
    outFile,
  );
}

export async function writeSftRecords(records: SftRecord[], outFile: string): Promise<number> {
  const lines = records.map((r) => JSON.stringify(r));
  await writeOutputFile(path.resolve(outFile), lines.length ? `${lines.join('\n')}\n` : '');
  return lines.length;
}

/** A file sft-export or sft-transcripts wrote: empty (no rows), or a first line that is an SFT record. */
export const SFT_OUTPUT: OwnOutput = {
  what: 'an SFT JSONL file',
  wrote: (abs) => {
    const head = readPrefix(abs, 1024 * 1024).toString('utf8');
    if (head === '') return true;
    const nl = head.indexOf('\n');
    try {
      const first = JSON.parse(nl < 0 ? head : head.slice(0, nl)) as Partial<SftRecord>;
      return typeof first.id === 'string' && Array.isArray(first.messages);
    } catch {
      return false;
    }
  },
};
