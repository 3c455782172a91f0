// What every command shares: global flags, config loading, JSON output, error exits.
import type { Command } from 'commander';
import { ConfigError, loadConfig } from '../config/load.js';
import type { TempoConfig } from '../config/schema.js';

export interface GlobalFlags {
  config?: string;
  set?: string[];
  json?: boolean;
}

export function globalFlags(cmd: Command): GlobalFlags {
  return cmd.optsWithGlobals() as GlobalFlags;
}

export function configFrom(cmd: Command, file?: string): TempoConfig {
  const flags = globalFlags(cmd);
  return loadConfig({ file: file ?? flags.config, sets: flags.set ?? [] });
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** Exit code 2 for usage/config errors, 1 for everything else; the message goes to stderr. */
export function failWith(err: unknown): never {
  if (err instanceof ConfigError) {
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  const e = err as Error & { exitCode?: number };
  process.stderr.write(`tempo-rl: ${e?.message ?? String(err)}\n`);
  process.exit(typeof e?.exitCode === 'number' ? e.exitCode : 1);
}

/** Wraps an action so that errors become clean exits. */
export function action<A extends unknown[]>(fn: (...args: A) => Promise<void> | void) {
  return async (...args: A): Promise<void> => {
    try {
      await fn(...args);
    } catch (err) {
      failWith(err);
    }
  };
}

export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
