// engines.extra_args as vLLM's own parser reads them, so that a check of a flag cannot be passed by
// spelling it another way. vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py) turns the
// underscores of a long option's name into dashes (`--max_num_seqs` is `--max-num-seqs`), splits
// `--flag=value`, and hands the rest to Python's argparse, which takes an unambiguous prefix for the
// whole name (`--max-num-se 8` sets max_num_seqs; measured on vLLM 0.32). Later flags win.

/** The option an argument names as vLLM reads it (`--max_num_seqs=8` → `--max-num-seqs`), or null for
 *  what is not a long option (a value, `-tp`, the `--` marker). */
export function engineFlagName(arg: string): string | null {
  if (!arg.startsWith('--') || arg === '--') return null;
  const key = arg.split('=', 1)[0]!;
  const dot = key.indexOf('.');
  // only the name before a `.` (a JSON-valued flag's field, --compilation-config.level) is rewritten
  return dot < 0 ? key.replaceAll('_', '-') : `${key.slice(0, dot).replaceAll('_', '-')}${key.slice(dot)}`;
}

export interface FoundFlag {
  index: number;
  /** As given in extra_args. */
  arg: string;
  /** The flag of `flags` it sets (or may set: an abbreviation argparse expands). */
  flag: string;
}

/**
 * The arguments that set one of `flags`: the name itself in any spelling, or a prefix of it (argparse
 * expands an unambiguous prefix; an ambiguous one fails vLLM's start, so it is refused here too).
 * `flags` may hold short aliases (`-tp`), matched as given.
 */
export function findEngineFlags(args: readonly string[], flags: readonly string[]): FoundFlag[] {
  const found: FoundFlag[] = [];
  args.forEach((arg, index) => {
    const name = engineFlagName(arg);
    const short = arg.startsWith('-') && !arg.startsWith('--') ? arg.split('=', 1)[0]! : null;
    const flag = flags.find((f) =>
      f.startsWith('--') ? name !== null && (name === f || (name.length > 2 && f.startsWith(name))) : short === f,
    );
    if (flag) found.push({ index, arg, flag });
  });
  return found;
}

/** The value the last of `flags` is given (`--flag value` or `--flag=value`), or undefined. */
export function engineFlagValue(args: readonly string[], flags: readonly string[]): string | undefined {
  const last = findEngineFlags(args, flags).at(-1);
  if (!last) return undefined;
  const eq = last.arg.indexOf('=');
  return eq >= 0 ? last.arg.slice(eq + 1) : args[last.index + 1];
}

/** Flags tempo-rl gives every engine it starts (supervise/engines.ts engineArgs), and why the same
 *  flag in extra_args (which comes later, and wins) would break the run. */
export const OWN_ENGINE_FLAGS: Readonly<Record<string, string>> = {
  '--host':
    'engines listen on 127.0.0.1 only: they run with VLLM_SERVER_DEV_MODE, whose routes load weights and run code; engines on other hosts are started by you and listed in engines.urls',
  '--port': 'engine i listens on engines.base_port + i',
  '--model': 'the engines serve model.path',
  '--served-model-name': 'tempo-rl asks the engines for the model by the name it gives it',
  '--worker-extension-cls': "the weight syncs go through tempo-rl's worker extension",
  '--seed': 'the engines are seeded with rollout.seed',
  '--logprobs-mode':
    'the trainer compares its logprobs with processed_logprobs (after temperature), which the engines must return',
  '--dtype': 'the engines serve model.dtype, the dtype the trainer computes in',
  '--max-model-len': 'set engines.max_model_len (checked against rollout.max_context_len)',
  '--config': "a vLLM config file can set any flag past these checks (and run.deterministic's); give the flags here",
  '--enforce-eager':
    'set engines.cuda_graphs (false: eager; auto: eager where CUDA graphs are not measured to keep parity)',
  '--no-enforce-eager': 'set engines.cuda_graphs (true: CUDA graphs)',
};

/** Flags that make a request's tokens depend on what else the engine holds (run.deterministic starts
 *  the engines without them, docs/certification.md). */
export const BATCHING_FLAGS = ['--max-num-seqs', '--enable-prefix-caching', '--enable-chunked-prefill'] as const;

const named = (f: FoundFlag) => (f.arg.split('=', 1)[0] === f.flag ? f.arg : `${f.arg} (vLLM reads it as ${f.flag})`);

/** What is wrong with engines.extra_args, by the index of the argument: flags that fight tempo-rl's
 *  own; with run.deterministic, flags that batch or cache across requests. */
export function engineArgProblems(
  args: readonly string[],
  deterministic: boolean,
): Array<{ index: number; message: string }> {
  const own = findEngineFlags(args, Object.keys(OWN_ENGINE_FLAGS)).map((f) => ({
    index: f.index,
    message: `${named(f)} is tempo-rl's to set: ${OWN_ENGINE_FLAGS[f.flag]}`,
  }));
  const batching = deterministic
    ? findEngineFlags(args, BATCHING_FLAGS).map((f) => ({
        index: f.index,
        message: `${named(f)} cannot be given with run.deterministic: true, which starts the engines with --max-num-seqs 1 (CPU), --no-enable-prefix-caching and --no-enable-chunked-prefill so that a request's tokens do not depend on what else is batched (docs/certification.md)`,
      }))
    : [];
  return [...own, ...batching];
}

/** extra_args for printing: the value of --api-key (any spelling) replaced, as the config's secrets are. */
export function redactEngineArgs(args: readonly string[]): string[] {
  const out = [...args];
  for (const f of findEngineFlags(args, ['--api-key'])) {
    if (f.arg.includes('=')) out[f.index] = `${f.arg.split('=', 1)[0]}=***`;
    else if (f.index + 1 < out.length) out[f.index + 1] = '***';
  }
  return out;
}
