// What every command shares: global flags, config loading, JSON output, error exits.
import type { Command } from 'commander';
import { ConfigError, loadConfig } from '../config/load.js';
import type { TempoConfig } from '../config/schema.js';
import { decodeUtf8 } from '../base/utf8.js';

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

/** Text for a terminal: control characters other than newline and tab (an escape sequence in a run id,
 *  an argument or a model's text would move the cursor, clear the screen or retitle the window) are
 *  written as \u escapes. */
export function printable(text: string): string {
  return text.replace(
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** Exit code 2 for usage/config errors, 1 for everything else; the message goes to stderr. */
export function failWith(err: unknown): never {
  if (err instanceof ConfigError) {
    process.stderr.write(`${printable(err.message)}\n`);
    process.exit(2);
  }
  const e = err as Error & { exitCode?: number };
  process.stderr.write(`tempo-rl: ${printable(e?.message ?? String(err))}\n`);
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

/** What a command reads from stdin (a model's response, a turn): far above any, and far below the
 *  string length V8 can hold (a bigger input failed with V8's own error). */
export const MAX_STDIN_BYTES = 64 * 1024 * 1024;

/** stdin as text: strict UTF-8 and at most MAX_STDIN_BYTES, or a usage error saying which. */
export async function readStdin(max = MAX_STDIN_BYTES): Promise<string> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of process.stdin) {
    total += (chunk as Buffer).length;
    if (total > max) {
      process.stdin.destroy();
      throw Object.assign(new Error(`stdin: more than ${max / 1024 / 1024} MiB; this command reads one response`), {
        exitCode: 2,
      });
    }
    chunks.push(chunk as Buffer);
  }
  try {
    return decodeUtf8(Buffer.concat(chunks, total));
  } catch (err) {
    throw Object.assign(new Error(`stdin: ${(err as Error).message}`), { exitCode: 2 });
  }
}
