// The config's error type and the small parsers every config source shares (the YAML file, the
// environment, the Temporal profile), apart from config/load.ts so that each source can use them.

export class ConfigError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

const TRUE_WORDS = new Set(['true', '1', 'yes', 'on']);
const FALSE_WORDS = new Set(['false', '0', 'no', 'off']);

/** true/false/1/0/yes/no/on/off, any case; anything else is an error naming the variable. */
export function parseBoolVar(name: string, raw: string): boolean {
  const v = raw.trim().toLowerCase();
  if (TRUE_WORDS.has(v)) return true;
  if (FALSE_WORDS.has(v)) return false;
  throw new ConfigError(`config: ${name}=${JSON.stringify(raw)}: expected true/false, 1/0, yes/no or on/off`);
}

/** The first line of a YAML or TOML parser's message: the rest quotes the source lines, which may
 *  hold a secret (an API key, a private key) or the contents of a file that is not a config at all. */
export function parserMessage(err: unknown): string {
  const e = err as Error & { line?: number; column?: number };
  const first = (e.message ?? String(err)).split('\n')[0]!.replace(/:$/, '');
  return e.line !== undefined && !/ at line \d+/.test(first) ? `${first} at line ${e.line}, column ${e.column}` : first;
}
