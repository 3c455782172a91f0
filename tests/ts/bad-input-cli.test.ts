// Bad input on the command line, table-driven: configs, flags, output folders, the server. Each row
// says the exit code, that the message names the thing and its value, and that nothing on disk was
// lost or overwritten. Rows run the CLI as a subprocess, as many at a time as there are cores (at least
// two): what bin/tempo-rl execs, node with tsx on cli/main.ts, without its set-up when this process has
// had it (the suite's), since the set-up costs each spawn a shell and hashes of the lock files; the rows
// about bin/tempo-rl itself run it. (In-process rows: bad-input.test.ts.)
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { lstatSync, mkdirSync, openSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { writeSyntheticDataset } from '../../lib/data/synth.js';
import { cacheDir, REPO_ROOT } from '../../base/paths.js';
import { stopServer } from '../../supervise/server.js';
import { BIN, fifo, file, fresh, freePort, modelDir, occupy, snapshot, tmp } from '../../testing/bad-input.js';

// The environment of a CLI row: a temp HOME and state dir, no TEMPORAL_* / TEMPO_RL__* / HF_* leaking in.
const baseEnv: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries(process.env).filter(
    ([k]) => !/^(TEMPORAL_|TEMPO_RL__|TEMPO_RL_(MODEL|DATASET|NUM_GPUS|STATE_DIR)$|HF_)/.test(k),
  ),
);
const cache = cacheDir();
/** bin/tempo-rl's last line, when its set-up (scripts/bootstrap.sh, which exports TEMPO_RL_PYTHON) is done. */
const CLI = process.env.TEMPO_RL_PYTHON
  ? [
      process.execPath,
      '--import',
      path.join(REPO_ROOT, 'node_modules', 'tsx', 'dist', 'loader.mjs'),
      path.join(REPO_ROOT, 'cli', 'main.ts'),
    ]
  : [BIN];

interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
  seconds: number;
}

function runCli(
  args: string[],
  opts: {
    env?: Record<string, string>;
    stdoutFile?: string;
    stdinFile?: string;
    timeoutMs?: number;
    state?: string;
    bin?: string;
    cwd?: string;
  } = {},
): Promise<CliResult> {
  const home = fresh('home');
  const env = {
    ...baseEnv,
    TEMPO_RL_CACHE: cache,
    TEMPO_RL_QUIET_BOOTSTRAP: '1',
    HOME: home,
    TEMPO_RL_STATE_DIR: opts.state ?? path.join(home, 'state'),
    TEMPO_RL__LOG_LEVEL: 'warn',
    ...opts.env,
  };
  const t0 = performance.now();
  return new Promise((resolve) => {
    const stdout = opts.stdoutFile ? openSync(opts.stdoutFile, 'w') : 'pipe';
    const stdin = opts.stdinFile ? openSync(opts.stdinFile, 'r') : 'ignore';
    const [cmd, ...pre] = opts.bin ? [opts.bin] : CLI;
    const child = spawn(cmd!, [...pre, ...args], { env, stdio: [stdin, stdout, 'pipe'], cwd: opts.cwd });
    let out = '';
    let err = '';
    child.stdout?.on('data', (d) => (out += d));
    child.stderr?.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout: out, stderr: err, seconds: (performance.now() - t0) / 1000 });
    });
  });
}

interface CliRow {
  kind: string;
  args: () => string[] | Promise<string[]>;
  env?: Record<string, string>;
  exit: number;
  /** Each must match stderr (the message names the thing and the value). */
  says?: RegExp[];
  /** Each must match neither stderr nor stdout: a secret, or the contents of a file that is not a config. */
  never?: RegExp[];
  /** A folder whose files must be byte-for-byte the same afterwards. */
  keeps?: () => string;
  stdoutFile?: string;
  /** A file to give the command as its stdin. */
  stdinFile?: () => string;
  /** Run bin/tempo-rl through this link, from this working directory. */
  via?: () => { bin: string; cwd: string };
  maxSeconds?: number;
  check?: (r: CliResult) => void;
  cleanup?: () => Promise<void>;
}

const yaml = (text: string | Buffer) => file('c.yaml', text);
const check = (...args: string[]) => ['config', 'check', '--json', ...args];
const set = (...kv: string[]) => kv.flatMap((s) => ['--set', s]);

// Folders prepared for the output-safety rows.
function userDir(): string {
  const d = fresh('user');
  writeFileSync(path.join(d, 'thesis.tex'), 'my only copy');
  mkdirSync(path.join(d, 'images'));
  writeFileSync(path.join(d, 'images', 'mine.png'), 'not ours');
  return d;
}
function fakeTinyModel(seed: number): string {
  const d = fresh('model');
  writeFileSync(path.join(d, '.complete'), 'ok\n');
  writeFileSync(
    path.join(d, 'tempo_rl_tiny.json'),
    JSON.stringify({ seed, generator: 'trainer.generators.tiny_model' }),
  );
  writeFileSync(path.join(d, 'model.safetensors'), `weights of seed ${seed}`);
  return d;
}
let synthDir = '';

/** `server start` with one of its ports held by another server; afterwards nothing of ours may run. */
function portTakenRow(which: 'port' | 'ui_port'): CliRow {
  let other: Awaited<ReturnType<typeof occupy>> | null = null;
  const state = path.join(tmp, `server-state-${which}`);
  return {
    kind: `server start with server.${which} taken by another server`,
    args: async () => {
      other = await occupy();
      const free = await freePort();
      const [port, ui] = which === 'port' ? [other.port, free] : [free, other.port];
      return ['server', 'start', ...set(`state_dir=${state}`, `server.port=${port}`, `server.ui_port=${ui}`)];
    },
    exit: 1,
    says: [new RegExp(`server\\.${which} \\d+ is taken`)],
    cleanup: async () => {
      await other?.close();
      // had it started anything, this stops it (and the row fails)
      assert.equal(
        await stopServer(loadConfig({ env: {}, sets: [`state_dir=${state}`] })),
        false,
        'a server was started',
      );
    },
  };
}

const tlsEnabled = (r: CliResult) => JSON.parse(r.stdout).temporal.tls.enabled as boolean;
const printed = (r: CliResult) =>
  JSON.parse(r.stdout) as { state_dir: string; blobs: { uri: string }; model: { path: string } };
const PEM =
  '-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n';

const CLI_ROWS: CliRow[] = [
  // ── config: values the trainer cannot honour or that make no sense (exit 2, key and value named)
  {
    kind: 'server.port equals server.ui_port',
    args: () => check(...set('server.port=7300', 'server.ui_port=7300')),
    exit: 2,
    says: [/server\.ui_port/, /7300/],
  },
  {
    kind: 'n_samples_per_prompt 1 (advantage always 0)',
    args: () => check(...set('rollout.n_samples_per_prompt=1')),
    exit: 2,
    says: [/rollout\.n_samples_per_prompt/, /number 1/],
  },
  {
    kind: 'engines.max_model_len below rollout.max_context_len',
    args: () => check(...set('engines.max_model_len=1024')),
    exit: 2,
    says: [/engines\.max_model_len/, /1024/, /4096/],
  },
  {
    kind: 'engine URL ftp:',
    args: () => check(...set('engines.urls=["ftp://h/x"]')),
    exit: 2,
    says: [/engines\.urls\.0/, /ftp:\/\/h\/x/],
  },
  {
    kind: 'engine URL javascript:',
    args: () => check(...set('engines.urls=["javascript:alert(1)"]')),
    exit: 2,
    says: [/engines\.urls\.0/, /javascript:alert/],
  },
  {
    kind: 'engine URL file:',
    args: () => check(...set('engines.urls=["file:///etc/passwd"]')),
    exit: 2,
    says: [/engines\.urls\.0/, /file:\/\/\/etc\/passwd/],
  },
  {
    kind: 'engine URL not a URL',
    args: () => check(...set('engines.urls=["localhost 8000"]')),
    exit: 2,
    says: [/engines\.urls\.0/, /localhost 8000/],
  },
  {
    kind: 'TEMPORAL_TLS=yes means TLS on',
    args: () => check(),
    env: { TEMPORAL_TLS: 'yes' },
    exit: 0,
    check: (r) => assert.equal(tlsEnabled(r), true),
  },
  {
    kind: 'TEMPORAL_TLS=TRUE means TLS on',
    args: () => check(),
    env: { TEMPORAL_TLS: 'TRUE' },
    exit: 0,
    check: (r) => assert.equal(tlsEnabled(r), true),
  },
  {
    kind: 'TEMPORAL_TLS=on means TLS on',
    args: () => check(),
    env: { TEMPORAL_TLS: 'on' },
    exit: 0,
    check: (r) => assert.equal(tlsEnabled(r), true),
  },
  {
    kind: 'TEMPORAL_TLS=Off means TLS off',
    args: () => check(),
    env: { TEMPORAL_TLS: 'Off' },
    exit: 0,
    check: (r) => assert.equal(tlsEnabled(r), false),
  },
  {
    kind: 'TEMPORAL_TLS=maybe',
    args: () => check(),
    env: { TEMPORAL_TLS: 'maybe' },
    exit: 2,
    says: [/TEMPORAL_TLS/, /"maybe"/],
  },
  {
    kind: 'non-UTF-8 bytes in the YAML',
    args: () =>
      check(
        yaml(Buffer.concat([Buffer.from('rollout:\n  max_turns: 2 # caf'), Buffer.from([0xe9]), Buffer.from('\n')])),
      ),
    exit: 2,
    says: [/c\.yaml/, /not valid UTF-8/, /0x/],
  },
  {
    kind: 'max_turns 1e12',
    args: () => check(...set('rollout.max_turns=1e12')),
    exit: 2,
    says: [/rollout\.max_turns/, /given 1e12/, /at most 64 turns/],
  },
  {
    kind: 'max_response_len above max_context_len',
    args: () => check(...set('rollout.max_response_len=5000')),
    exit: 2,
    says: [/rollout\.max_response_len/, /5000/, /max_context_len/],
  },
  {
    kind: 'eps_clip_high below eps_clip',
    args: () => check(...set('grpo.eps_clip_high=0.1')),
    exit: 2,
    says: [/grpo\.eps_clip_high/, /0\.1/],
  },
  {
    kind: 'eval every k steps with 0 eval prompts',
    args: () => check(...set('run.eval_interval=2', 'run.eval_prompts=0')),
    exit: 2,
    says: [/run\.eval_prompts/, /number 0/],
  },
  {
    kind: 'model.dtype float16 (no loss scaling)',
    args: () => check(...set('model.dtype=float16')),
    exit: 2,
    says: [/model\.dtype/, /float16/, /bfloat16/],
  },
  {
    kind: 'model.num_gpus 8 with a standby trainer',
    args: () => check(...set('model.num_gpus=8')),
    exit: 2,
    says: [/run\.trainer_standbys/, /model\.num_gpus/, /\(8\)/],
  },
  {
    kind: 'TEMPO_RL_NUM_GPUS=8 with a standby trainer',
    args: () => check(),
    env: { TEMPO_RL_NUM_GPUS: '8' },
    exit: 2,
    says: [/run\.trainer_standbys/, /model\.num_gpus/],
  },
  {
    kind: 'model.num_gpus 8 without standbys is honoured',
    args: () => check(...set('model.num_gpus=8', 'run.trainer_standbys=0')),
    exit: 0,
  },
  {
    kind: 'model.num_gpus -1',
    args: () => check(...set('model.num_gpus=-1')),
    exit: 2,
    says: [/model\.num_gpus/, /-1/],
  },
  {
    kind: 'run.checkpoint_interval 0',
    args: () => check(...set('run.checkpoint_interval=0')),
    exit: 2,
    says: [/run\.checkpoint_interval/, /number 0/],
  },
  { kind: 'run.checkpoint_interval 20 is honoured', args: () => check(...set('run.checkpoint_interval=20')), exit: 0 },
  {
    kind: 'keep_checkpoint_every not a multiple of the interval',
    args: () => check(...set('run.checkpoint_interval=4', 'run.keep_checkpoints=2', 'run.keep_checkpoint_every=6')),
    exit: 2,
    says: [/run\.keep_checkpoint_every/, /multiple of run\.checkpoint_interval \(4\)/],
  },
  {
    kind: 'keep_checkpoint_every without keep_checkpoints',
    args: () => check(...set('run.keep_checkpoint_every=4')),
    exit: 2,
    says: [/run\.keep_checkpoint_every/, /needs run\.keep_checkpoints > 0/],
  },
  { kind: '--set __proto__.x=1', args: () => check(...set('__proto__.polluted=1')), exit: 2, says: [/"__proto__"/] },
  {
    kind: '--set constructor.prototype.x=1',
    args: () => check(...set('constructor.prototype.x=1')),
    exit: 2,
    says: [/"constructor"/],
  },
  {
    kind: '__proto__ key in the YAML',
    args: () => check(yaml('__proto__:\n  polluted: 1\n')),
    exit: 2,
    says: [/c\.yaml/, /"__proto__"/],
  },
  {
    kind: 'an empty config file warns',
    args: () => check(yaml('# nothing here\n')),
    exit: 0,
    says: [/c\.yaml is empty; using the defaults/],
  },
  {
    kind: 'misspelled key',
    args: () => check(yaml('rollout:\n  max_trns: 2\n')),
    exit: 2,
    says: [/rollout\.max_trns: unknown key — did you mean "max_turns"/],
  },
  {
    kind: 'wrong type',
    args: () => check(...set('rollout.temperature=hot')),
    exit: 2,
    says: [/rollout\.temperature/, /"hot"/],
  },
  {
    kind: 'rollout.top_p (a removed key)',
    args: () => check(...set('rollout.top_p=1')),
    exit: 2,
    says: [/rollout\.top_p: unknown key — removed: /, /full distribution/],
  },
  {
    kind: 'missing config file',
    args: () => check(path.join(tmp, 'nope.yaml')),
    exit: 2,
    says: [/cannot read .*nope\.yaml/],
  },
  {
    kind: 'a YAML list at the top',
    args: () => check(yaml('- a\n- b\n')),
    exit: 2,
    says: [/c\.yaml/, /mapping/, /an array/],
  },
  { kind: 'invalid YAML', args: () => check(yaml('rollout: [1, 2\n')), exit: 2, says: [/c\.yaml is not valid YAML/] },
  {
    kind: '--set without =',
    args: () => check(...set('rollout.max_turns')),
    exit: 2,
    says: [/--set "rollout\.max_turns"/],
  },
  {
    kind: 'TEMPO_RL__ROLLOUT__MAX_TURNS=abc',
    args: () => check(),
    env: { TEMPO_RL__ROLLOUT__MAX_TURNS: 'abc' },
    exit: 2,
    says: [/rollout\.max_turns/, /"abc"/],
  },
  {
    kind: 'geo3k multi-turn config passes check',
    args: () => check(path.join(REPO_ROOT, 'configs/geo3k-multiturn-qwen3vl-2b.yaml')),
    exit: 0,
  },
  {
    kind: 'geo3k single-turn config passes check',
    args: () => check(path.join(REPO_ROOT, 'configs/geo3k-singleturn-qwen3vl-2b.yaml')),
    exit: 0,
  },
  {
    kind: 'geo3k single-turn Qwen3.5-35B-A3B config passes check',
    args: () => check(path.join(REPO_ROOT, 'configs/geo3k-singleturn-qwen35-35b-a3b.yaml')),
    exit: 0,
  },
  { kind: 'CPU demo config passes check', args: () => check(path.join(REPO_ROOT, 'configs/cpu-tiny.yaml')), exit: 0 },
  {
    kind: 'CPU warm-start SFT config passes check',
    args: () => check(path.join(REPO_ROOT, 'configs/cpu-tiny-sft.yaml')),
    exit: 0,
  },

  // ── durations: Node's timers take at most 2^31−1 ms; a longer one fires at once (every request aborts)
  {
    kind: 'engines.request_timeout_s 1e9 meant as "no timeout"',
    args: () => check(...set('engines.request_timeout_s=1e9')),
    exit: 2,
    says: [/engines\.request_timeout_s/, /1000000000/, /at most 2147483 s/, /Node's timers/],
  },
  {
    kind: 'engines.request_timeout_s 1e308',
    args: () => check(...set('engines.request_timeout_s=1e308')),
    exit: 2,
    says: [/engines\.request_timeout_s/, /1e\+308/, /at most 2147483 s/],
  },
  {
    kind: 'engines.health_interval_s 1e9 (1 ms polling)',
    args: () => check(...set('engines.health_interval_s=1e9')),
    exit: 2,
    says: [/engines\.health_interval_s/, /1000000000/, /Node's timers/],
  },
  {
    kind: 'run.empty_step_wait_s above the timer bound',
    args: () => check(...set('run.empty_step_wait_s=2147484')),
    exit: 2,
    says: [/run\.empty_step_wait_s/, /2147484/],
  },
  {
    kind: 'engines.request_timeout_s at the timer bound is honoured',
    args: () => check(...set('engines.request_timeout_s=2147483')),
    exit: 0,
  },
  // ── sizes that would exhaust memory before anything useful
  {
    kind: 'dataset.max_image_pixels 10^12',
    args: () => check(...set('dataset.max_image_pixels=1000000000000')),
    exit: 2,
    says: [/dataset\.max_image_pixels/, /1000000000000/, /at most 268402689/],
  },
  {
    kind: 'grpo.micro_batch_tokens 2^40',
    args: () => check(...set('grpo.micro_batch_tokens=1099511627776')),
    exit: 2,
    says: [/grpo\.micro_batch_tokens/, /1099511627776/, /at most 16777216/],
  },
  {
    kind: 'dataset.synthetic_size 10^9',
    args: () => check(...set('dataset.synthetic_size=1000000000')),
    exit: 2,
    says: [/dataset\.synthetic_size/, /1000000000/, /at most 1000000/],
  },
  {
    kind: 'engines.base_port + count beyond port 65535',
    args: () => check(...set('engines.base_port=65535', 'engines.count=2')),
    exit: 2,
    says: [/engines\.base_port/, /65535/],
  },
  // ── importance weights: clip below 1 trains on nothing (mask) or cuts every weight (truncate)
  {
    kind: 'grpo.tis.clip 0.5 with mask (an empty band)',
    args: () => check(...set('grpo.tis.enabled=true', 'grpo.tis.mode=mask', 'grpo.tis.clip=0.5')),
    exit: 2,
    says: [/grpo\.tis\.clip/, /number 0\.5/, /at least 1/],
  },
  {
    kind: 'grpo.tis.clip 0.5 with truncate',
    args: () => check(...set('grpo.tis.enabled=true', 'grpo.tis.clip=0.5')),
    exit: 2,
    says: [/grpo\.tis\.clip/, /number 0\.5/, /at least 1/],
  },
  {
    kind: 'grpo.tis.clip 1 with mask (only exact ratios)',
    args: () => check(...set('grpo.tis.enabled=true', 'grpo.tis.mode=mask', 'grpo.tis.clip=1')),
    exit: 2,
    says: [/grpo\.tis\.clip/, /number 1/, /above 1 with grpo\.tis\.mode mask/],
  },
  {
    kind: 'grpo.tis.clip 1 with truncate is honoured',
    args: () => check(...set('grpo.tis.enabled=true', 'grpo.tis.clip=1')),
    exit: 0,
  },
  // ── engines.extra_args read as vLLM reads them (config/engine-args.ts)
  {
    kind: 'run.deterministic with --max_num_seqs (vLLM reads --max-num-seqs)',
    args: () => check(...set('run.deterministic=true', 'engines.extra_args=["--max_num_seqs", "8"]')),
    exit: 2,
    says: [/engines\.extra_args\.0/, /--max_num_seqs \(vLLM reads it as --max-num-seqs\)/, /run\.deterministic/],
  },
  {
    kind: 'run.deterministic with --enable_prefix_caching',
    args: () => check(...set('run.deterministic=true', 'engines.extra_args=["--enable_prefix_caching"]')),
    exit: 2,
    says: [/engines\.extra_args\.0/, /--enable-prefix-caching/, /run\.deterministic/],
  },
  {
    kind: 'run.deterministic with --max-num-se 8 (an abbreviation argparse expands)',
    args: () => check(...set('run.deterministic=true', 'engines.extra_args=["--max-num-se", "8"]')),
    exit: 2,
    says: [/--max-num-se \(vLLM reads it as --max-num-seqs\)/],
  },
  {
    kind: 'run.deterministic with --max-num-seqs=8',
    args: () => check(...set('run.deterministic=true', 'engines.extra_args=["--max-num-seqs=8"]')),
    exit: 2,
    says: [/--max-num-seqs=8 cannot be given with run\.deterministic/],
  },
  {
    kind: 'engines.extra_args --host 0.0.0.0 (a dev-mode engine on every interface)',
    args: () => check(...set('engines.extra_args=["--host", "0.0.0.0"]')),
    exit: 2,
    says: [/engines\.extra_args\.0: --host is tempo-rl's to set/, /127\.0\.0\.1/],
  },
  {
    kind: 'engines.extra_args --served_model_name=x, --worker-extension-cls, --model, --port, --seed, --logprobs-mode',
    args: () =>
      check(
        ...set(
          'engines.extra_args=["--served_model_name=x", "--worker-extension-cls", "m.C", "--model", "m", "--port=9", "--seed", "1", "--logprobs-mode", "raw_logprobs"]',
        ),
      ),
    exit: 2,
    says: [
      /extra_args\.0: --served_model_name=x \(vLLM reads it as --served-model-name\)/,
      /extra_args\.1: --worker-extension-cls/,
      /extra_args\.3: --model/,
      /extra_args\.5: --port=9/,
      /extra_args\.6: --seed/,
      /extra_args\.8: --logprobs-mode/,
    ],
  },
  {
    kind: 'engines.extra_args --api-key is redacted by config check',
    args: () => check(...set('engines.extra_args=["--api-key", "sekrit-engine", "--api_key=sekrit-two"]')),
    exit: 0,
    never: [/sekrit-engine/, /sekrit-two/],
    check: (r) => assert.deepEqual(JSON.parse(r.stdout).engines.extra_args, ['--api-key', '***', '--api_key=***']),
  },
  {
    kind: 'engines.extra_args with a bare number: the hint says to quote it',
    args: () => check(...set('engines.extra_args=["--max-num-batched-tokens", 8192]')),
    exit: 2,
    says: [/engines\.extra_args\.1/, /given number 8192 \(write it in quotes, "8192"/],
  },
  {
    kind: 'engines.sleep_level 3 names 1 and 2',
    args: () => check(...set('engines.sleep_level=3')),
    exit: 2,
    says: [/engines\.sleep_level: must be 1 .* or 2 /, /given number 3/],
  },
  {
    kind: 'engines.sleep_level without engines.colocate (nothing sleeps)',
    args: () => check(...set('engines.sleep_level=1')),
    exit: 2,
    says: [/engines\.sleep_level: is for colocated engines/, /given number 1/],
  },
  {
    kind: 'engines.ipc_bucket_mb 1e12 suggests no value that is refused',
    args: () => check(...set('engines.ipc_bucket_mb=1e12')),
    exit: 2,
    says: [/engines\.ipc_bucket_mb/, /given 1e12/, /at most 65536/],
    never: [/write 1000000000000/],
  },
  // ── config-like files that are not regular files: refused at once, never waited on
  {
    kind: 'config check of a FIFO',
    args: () => check(fifo('c.yaml')),
    exit: 2,
    maxSeconds: 20,
    says: [/fifo-\d+\/c\.yaml/, /a FIFO \(named pipe\), not a regular file/],
  },
  {
    kind: 'config check of /dev/zero',
    args: () => check('/dev/zero'),
    exit: 2,
    maxSeconds: 20,
    says: [/\/dev\/zero/, /a character device/],
  },
  {
    kind: 'config check of /dev/urandom',
    args: () => check('/dev/urandom'),
    exit: 2,
    maxSeconds: 20,
    says: [/\/dev\/urandom/, /a character device/],
  },
  {
    kind: 'config check of a directory',
    args: () => check(fresh('conf')),
    exit: 2,
    says: [/conf-\d+/, /a directory, not a regular file/],
  },
  {
    kind: 'a 9 MiB config file',
    args: () => check(yaml(`# ${'x'.repeat(9 * 1024 * 1024)}\n`)),
    exit: 2,
    says: [/c\.yaml/, /more than a config file can be \(8\.0 MiB\)/],
  },
  {
    kind: 'TEMPORAL_CONFIG_FILE=/dev/zero',
    args: () => check(),
    env: { TEMPORAL_CONFIG_FILE: '/dev/zero' },
    exit: 2,
    maxSeconds: 20,
    says: [/TEMPORAL_CONFIG_FILE=\/dev\/zero/, /a character device/],
  },
  {
    kind: 'TEMPORAL_CONFIG_FILE a FIFO',
    args: () => check(),
    env: { TEMPORAL_CONFIG_FILE: fifo('temporal.toml') },
    exit: 2,
    maxSeconds: 20,
    says: [/TEMPORAL_CONFIG_FILE=.*temporal\.toml/, /a FIFO/],
  },
  // ── the blob store's URI: where a store can live
  {
    kind: 'blobs.uri under /proc',
    args: () => check(...set('blobs.uri=/proc/x')),
    exit: 2,
    maxSeconds: 20,
    says: [/blobs\.uri/, /\/proc\/x/, /virtual filesystem/],
  },
  {
    kind: 'blobs.uri file:///sys/x',
    args: () => check(...set('blobs.uri=file:///sys/x')),
    exit: 2,
    maxSeconds: 20,
    says: [/blobs\.uri/, /\/sys\/x/, /virtual filesystem/],
  },
  {
    kind: 'blobs.uri "~/blobs" is in the home folder',
    args: () => check(...set('blobs.uri=~/blobs')),
    exit: 0,
    check: (r) => assert.match(printed(r).blobs.uri, /^file:\/\/\/.*\/home-\d+\/blobs$/),
  },
  {
    kind: 'blobs.uri "~other/blobs"',
    args: () => check(...set('blobs.uri=~other/blobs')),
    exit: 2,
    says: [/blobs\.uri/, /~other/, /another user's home/],
  },
  {
    kind: 'blobs.uri of three spaces',
    args: () => check(...set('blobs.uri="   "')),
    exit: 2,
    says: [/blobs\.uri/, /" {3}"/, /blank/],
  },
  {
    kind: 'blobs.uri padded with spaces',
    args: () => check(...set('blobs.uri=" /tmp/b "')),
    exit: 2,
    says: [/blobs\.uri/, /" \/tmp\/b "/, /whitespace/],
  },
  {
    kind: 'blobs.uri file:///tmp/a%00b (a NUL once decoded)',
    args: () => check(...set('blobs.uri=file:///tmp/a%00b')),
    exit: 2,
    says: [/blobs\.uri/, /a%00b/, /NUL/],
  },
  {
    kind: 'blobs.uri file:///tmp/a%0Ab (a newline once decoded)',
    args: () => check(...set('blobs.uri=file:///tmp/a%0Ab')),
    exit: 2,
    says: [/blobs\.uri/, /a%0Ab/, /control character "\\n"/],
  },
  {
    kind: 'state_dir "~/st" is in the home folder',
    args: () => check(...set('state_dir=~/st')),
    exit: 0,
    check: (r) => assert.match(printed(r).state_dir, /\/home-\d+\/st$/),
  },
  {
    kind: 'state_dir under /proc',
    args: () => check(...set('state_dir=/proc/tempo')),
    exit: 2,
    maxSeconds: 20,
    says: [/state_dir/, /\/proc\/tempo/, /virtual filesystem/],
  },
  {
    kind: 'state_dir of spaces',
    args: () => check(...set('state_dir="  "')),
    exit: 2,
    says: [/state_dir/, /" {2}"/, /blank/],
  },
  // ── routing replay needs an MoE model
  {
    kind: 'routing_replay with the tiny dense default model',
    args: () => check(...set('rollout.routing_replay=true', 'model.num_gpus=1')),
    exit: 2,
    says: [/rollout\.routing_replay/, /mixture-of-experts/, /model\.path empty/, /dense/],
  },
  {
    kind: 'routing_replay with a local dense model folder',
    args: () =>
      check(
        ...set(
          'rollout.routing_replay=true',
          'model.num_gpus=1',
          `model.path=${modelDir({ model_type: 'qwen3_vl', text_config: { hidden_size: 8 } })}`,
        ),
      ),
    exit: 2,
    says: [/rollout\.routing_replay/, /model\.path .*model-\d+ is a dense model/],
  },
  {
    kind: 'routing_replay with a local MoE model folder is honoured',
    args: () =>
      check(
        ...set(
          'rollout.routing_replay=true',
          'model.num_gpus=1',
          `model.path=${modelDir({ model_type: 'qwen3_vl_moe', text_config: { num_experts: 4 } })}`,
        ),
      ),
    exit: 0,
  },
  {
    kind: 'routing_replay with a Hugging Face id is left to the trainer',
    args: () =>
      check(...set('rollout.routing_replay=true', 'model.num_gpus=1', 'model.path=Qwen/Qwen3-VL-30B-A3B-Instruct')),
    exit: 0,
  },
  // ── files the config names, checked where config check runs
  {
    kind: 'sft.path that does not exist is warned of',
    args: () => check(...set('algorithm=sft', `sft.path=${path.join(tmp, 'nope.jsonl')}`)),
    exit: 0,
    says: [/warning: sft\.path ".*nope\.jsonl": no such file/],
  },
  {
    kind: 'sft.path a folder',
    args: () => check(...set('algorithm=sft', `sft.path=${fresh('sftdir')}`)),
    exit: 2,
    says: [/sft\.path ".*sftdir-\d+": is a directory, not a regular file/],
  },
  {
    kind: 'sft.path a FIFO',
    args: () => check(...set('algorithm=sft', `sft.path=${fifo('t.jsonl')}`)),
    exit: 2,
    maxSeconds: 20,
    says: [/sft\.path ".*t\.jsonl": is a FIFO/],
  },
  {
    kind: 'a TLS client certificate that does not exist',
    args: () => check(...set(`temporal.tls.client_cert_path=${path.join(tmp, 'no-cert.pem')}`)),
    exit: 2,
    says: [/temporal\.tls\.client_cert_path ".*no-cert\.pem": no such file/],
  },
  {
    kind: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH=/dev/zero',
    args: () => check(),
    env: { TEMPORAL_TLS_SERVER_CA_CERT_PATH: '/dev/zero' },
    exit: 2,
    says: [/temporal\.tls\.server_ca_cert_path "\/dev\/zero": is a character device/],
  },
  {
    kind: 'a JSONL dataset that does not exist is warned of',
    args: () => check(...set('dataset.kind=jsonl', `dataset.path=${path.join(tmp, 'nope-{split}.jsonl')}`)),
    exit: 0,
    says: [
      /warning: dataset\.path ".*nope-train\.jsonl": no such file or folder \(split "train"\)/,
      /nope-test\.jsonl/,
    ],
  },
  {
    kind: 'a Parquet dataset without a path',
    args: () => check(...set('dataset.kind=parquet')),
    exit: 2,
    says: [/dataset\.path: is required for dataset\.kind parquet/],
  },
  {
    kind: "a geo3k_dir folder without the split's file",
    args: () => check(...set('dataset.kind=geo3k_dir', `dataset.path=${fresh('geo')}`)),
    exit: 2,
    says: [/dataset\.path ".*geo-\d+"/, /no \.jsonl file for split "train"/],
  },
  // ── messages: suggest only near keys; never echo a secret or a file's contents
  {
    kind: 'a one-letter unknown key suggests nothing',
    args: () => check(yaml('x: 1\n')),
    exit: 2,
    says: [/^ {2}x: unknown key$/m],
    never: [/did you mean/],
  },
  {
    kind: 'a misspelled short key still gets its suggestion',
    args: () => check(yaml('sfy:\n  lr: 1\n')),
    exit: 2,
    says: [/sfy: unknown key — did you mean "sft"/],
  },
  {
    kind: 'an API key of the wrong type is not echoed',
    args: () => check(...set('temporal.api_key=12345678901')),
    exit: 2,
    says: [/temporal\.api_key/, /not shown/],
    never: [/12345678901/],
  },
  {
    kind: 'a TLS key given as both path and data: the PEM is not echoed',
    args: () =>
      check(...set('temporal.tls.client_key_path=/k.pem', `temporal.tls.client_key_data=${JSON.stringify(PEM)}`)),
    exit: 2,
    says: [/temporal\.tls\.client_key_data/, /not both/, /not shown/],
    never: [/MIIEv/],
  },
  {
    kind: 'invalid YAML on the API key line is not quoted',
    args: () => check(yaml('temporal:\n  api_key: "sekrit-value\n')),
    exit: 2,
    says: [/c\.yaml is not valid YAML/, /line \d+, column \d+/],
    never: [/sekrit-value/],
  },
  {
    kind: 'a private key given as the config file is not echoed',
    args: () => check(yaml(PEM)),
    exit: 2,
    says: [/c\.yaml/, /expected a mapping/, /not shown/],
    never: [/MIIEv/],
  },
  {
    kind: 'invalid TOML on the API key line is not quoted',
    args: () => check(),
    env: { TEMPORAL_CONFIG_FILE: file('t.toml', '[profile.default]\napi_key = "sekrit-toml\n') },
    exit: 2,
    says: [/t\.toml is not valid TOML/],
    never: [/sekrit-toml/],
  },
  // ── numbers: integers written as integers, empty is empty (not 0 or null)
  {
    kind: '--set rollout.seed=1e3',
    args: () => check(...set('rollout.seed=1e3')),
    exit: 2,
    says: [/--set rollout\.seed/, /given 1e3/, /write 1000/],
  },
  {
    kind: 'TEMPO_RL__SERVER__PORT=7.3e3',
    args: () => check(),
    env: { TEMPO_RL__SERVER__PORT: '7.3e3' },
    exit: 2,
    says: [/TEMPO_RL__SERVER__PORT/, /server\.port/, /7\.3e3/],
  },
  {
    kind: 'rollout.seed 1e3 in the YAML',
    args: () => check(yaml('rollout:\n  seed: 1e3\n')),
    exit: 2,
    says: [/c\.yaml/, /rollout\.seed/, /1e3/],
  },
  {
    kind: 'rollout.reward_fn (a removed key)',
    args: () => check(...set('rollout.reward_fn=math')),
    exit: 2,
    says: [/rollout\.reward_fn: unknown key — removed: /],
  },
  {
    kind: 'floats in exponent form stay floats',
    args: () => check(...set('grpo.lr=1e-3', 'rollout.temperature=1.0', 'engines.request_timeout_s=1.2e2')),
    exit: 0,
  },
  {
    kind: 'TEMPO_RL__RUN__STEPS empty is not 0',
    args: () => check(),
    env: { TEMPO_RL__RUN__STEPS: '' },
    exit: 2,
    says: [/run\.steps/, /given the string ""/],
  },
  {
    kind: '--set model.path= means the default',
    args: () => check(...set('model.path=')),
    exit: 0,
    check: (r) => assert.equal(printed(r).model.path, ''),
  },
  // ── what config check shows of the connection
  {
    kind: 'an API key turns TLS on: config check notes it',
    args: () => check(),
    env: { TEMPORAL_API_KEY: 'k' },
    exit: 0,
    says: [/note: temporal\.tls\.enabled is false, but the connection uses TLS: temporal\.api_key is set/],
    never: [/"k"/],
  },

  // ── command line
  { kind: 'bare tempo-rl: help, exit 2', args: () => [], exit: 2, says: [/Usage: tempo-rl/] },
  { kind: 'a group without its subcommand', args: () => ['data'], exit: 2, says: [/Usage: tempo-rl data/] },
  { kind: 'unknown command', args: () => ['trian'], exit: 2, says: [/unknown command 'trian'/] },
  { kind: '--help exits 0', args: () => ['--help'], exit: 0 },
  {
    kind: 'stdout on a full disk',
    args: () => check(),
    stdoutFile: '/dev/full',
    exit: 1,
    says: [/cannot write to stdout/, /ENOSPC/],
    check: (r) => assert.doesNotMatch(r.stderr, /\n\s+at /),
  },
  { kind: 'model tiny --seed abc', args: () => ['model', 'tiny', '--seed', 'abc'], exit: 2, says: [/seed/, /"abc"/] },
  {
    kind: 'data synth --n abc',
    args: () => ['data', 'synth', '--out', path.join(tmp, 'never'), '--n', 'abc'],
    exit: 2,
    says: [/--n/, /abc/],
  },
  {
    kind: 'sft-transcripts --per-row 0',
    args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--per-row', '0'],
    exit: 2,
    says: [/--per-row/, /given "0"/],
  },
  {
    kind: "sft-transcripts --habit (an experiment's flag, gone)",
    args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--habit', '180'],
    exit: 2,
    says: [/unknown option '--habit'/],
  },
  {
    kind: 'sft-transcripts --per-row 100000000',
    args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--per-row', '100000000'],
    exit: 2,
    maxSeconds: 20,
    says: [/--per-row/, /at most 10000/, /given "100000000"/],
  },
  {
    kind: 'sft-transcripts --per-row 1e3',
    args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--per-row', '1e3'],
    exit: 2,
    says: [/--per-row/, /given "1e3"/],
  },
  {
    kind: 'sft-transcripts --per-row whose copies are too many in all',
    args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--per-row', '10000'],
    exit: 2,
    says: [/--per-row 10000/, /× 64 rows/, /more than 250000/],
  },
  {
    kind: 'sft-transcripts --first-correct "" (not 0)',
    args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--first-correct', ''],
    exit: 2,
    says: [/--first-correct/, /given ""/],
  },
  {
    kind: 'data synth --n 1e3',
    args: () => ['data', 'synth', '--out', path.join(tmp, 'never'), '--n', '1e3'],
    exit: 2,
    says: [/--n/, /given "1e3"/],
  },
  {
    kind: 'sft-export --split test',
    args: () => ['data', 'sft-export', '--out', path.join(tmp, 'never.jsonl'), '--split', 'test'],
    exit: 2,
    says: [/--split "test"/],
  },
  {
    kind: 'episodes list --step x',
    args: () => ['episodes', 'list', 'r1', '--step', 'x'],
    exit: 2,
    says: [/--step "x"/],
  },
  {
    kind: 'episodes list --step "" (not step 0)',
    args: () => ['episodes', 'list', 'r1', '--step', ''],
    exit: 2,
    says: [/--step ""/],
  },
  {
    kind: 'episodes list --step 1e1 (not step 10)',
    args: () => ['episodes', 'list', 'r1', '--step', '1e1'],
    exit: 2,
    says: [/--step "1e1"/],
  },
  {
    kind: 'model tiny --seed 1e3 (not seed 1000)',
    args: () => ['model', 'tiny', '--seed', '1e3'],
    exit: 2,
    says: [/seed/, /"1e3"/],
  },
  {
    kind: 'episodes list of a run id that climbs out of the runs folder',
    args: () => ['episodes', 'list', '../x'],
    exit: 2,
    says: [/run id "\.\.\/x"/],
  },
  {
    kind: 'data download of an unknown dataset',
    args: () => ['data', 'download', 'mnist', '--out', path.join(tmp, 'never')],
    exit: 2,
    says: [/unknown dataset mnist/],
  },
  {
    kind: 'HF_ENDPOINT "not a url"',
    args: () => ['data', 'download', 'geo3k', '--out', path.join(tmp, 'never')],
    env: { HF_ENDPOINT: 'not a url' },
    exit: 2,
    says: [/HF_ENDPOINT/, /"not a url"/],
  },
  {
    kind: 'status RUN with no server: does not wait for one, names the address',
    args: async () => ['status', 'r1', ...set(`server.port=${await freePort()}`)],
    exit: 1,
    maxSeconds: 30,
    says: [/no Temporal server answers at 127\.0\.0\.1:\d+/],
  },
  {
    kind: 'pause RUN with no server at TEMPORAL_ADDRESS',
    args: () => ['pause', 'r1'],
    env: { TEMPORAL_ADDRESS: '127.0.0.1:1' },
    exit: 1,
    maxSeconds: 30,
    says: [/127\.0\.0\.1:1 /, /TEMPORAL_ADDRESS/],
  },

  // ── a run's stack, checked before anything starts (supervise/preflight.ts)
  {
    kind: 'train with a malformed TEMPO_RL_KILL_AT: refused before anything starts',
    args: async () => [
      'train',
      path.join(REPO_ROOT, 'configs/cpu-tiny.yaml'),
      ...set(
        'engines.urls=["http://127.0.0.1:9"]',
        `server.port=${await freePort()}`,
        `server.ui_port=${await freePort()}`,
      ),
    ],
    env: { TEMPO_RL_KILL_AT: '[{"point": "generateTurn", "phase": "start"' },
    exit: 2,
    maxSeconds: 30,
    says: [/TEMPO_RL_KILL_AT is not JSON/, /nothing was started/],
  },
  {
    kind: 'train with a kill point no worker reaches (it would never fire)',
    args: async () => [
      'train',
      path.join(REPO_ROOT, 'configs/cpu-tiny.yaml'),
      ...set(
        'engines.urls=["http://127.0.0.1:9"]',
        `server.port=${await freePort()}`,
        `server.ui_port=${await freePort()}`,
      ),
    ],
    env: { TEMPO_RL_KILL_AT: '[{"point": "generate_turn", "phase": "start", "once": "/tmp/never"}]' },
    exit: 2,
    maxSeconds: 30,
    says: [/point "generate_turn" is reached by no worker/],
  },
  {
    kind: 'train with engines.urls that do not answer: named, nothing started',
    args: async () => [
      'train',
      path.join(REPO_ROOT, 'configs/cpu-tiny.yaml'),
      ...set(
        `engines.urls=["http://127.0.0.1:${await freePort()}"]`,
        `server.port=${await freePort()}`,
        `server.ui_port=${await freePort()}`,
      ),
    ],
    exit: 1,
    maxSeconds: 30,
    says: [
      /engines\.urls: http:\/\/127\.0\.0\.1:\d+ does not answer \(GET \/health: ECONNREFUSED\); nothing was started/,
    ],
  },
  {
    kind: 'engine start with model.num_gpus 1 where CUDA_VISIBLE_DEVICES shows none',
    args: () => ['engine', 'start', ...set('model.num_gpus=1', 'run.trainer_standbys=0')],
    env: { CUDA_VISIBLE_DEVICES: '' },
    exit: 2,
    maxSeconds: 30,
    says: [/model\.num_gpus is 1, but this machine shows no GPU/, /CUDA_VISIBLE_DEVICES=""/],
  },
  {
    kind: 'status of a run id that climbs out of the runs folder',
    args: () => ['status', '../x'],
    exit: 2,
    says: [/run id "\.\.\/x"/],
  },
  {
    kind: 'pause of a run id with an escape sequence: printed escaped',
    args: () => ['pause', 'r\u001b[2J'],
    exit: 2,
    says: [/run id "r\\u001b\[2J"/],
    never: [/\u001b/],
  },
  {
    kind: 'an unknown command with an escape sequence: printed escaped',
    args: () => ['\u001b]0;owned\u0007'],
    exit: 2,
    says: [/unknown command '\\u001b\]0;owned\\u0007'/],
    never: [/\u001b/, /\u0007/],
  },
  {
    kind: 'worker trainer with no Temporal server: a sentence, not a traceback',
    args: async () => ['worker', 'trainer', ...set(`server.port=${await freePort()}`)],
    exit: 1,
    maxSeconds: 30,
    says: [/no Temporal server answers at 127\.0\.0\.1:\d+/],
    never: [/Traceback/],
  },
  {
    kind: 'config check of model.num_gpus 1 where CUDA_VISIBLE_DEVICES shows none: a warning',
    args: () => check(...set('model.num_gpus=1', 'run.trainer_standbys=0')),
    env: { CUDA_VISIBLE_DEVICES: '' },
    exit: 0,
    says: [/warning: model\.num_gpus is 1, but this machine shows 0/],
  },
  // ── tempo-rl ui --host: compared as addresses, refused before anything starts
  ...['0', '::0', '0:0:0:0:0:0:0:0'].map(
    (host): CliRow => ({
      kind: `ui --host ${host} (every interface)`,
      args: async () => [
        'ui',
        '--host',
        host,
        '--port',
        '0',
        ...set(`server.port=${await freePort()}`, `server.ui_port=${await freePort()}`),
      ],
      exit: 2,
      maxSeconds: 20,
      says: [new RegExp(`--host "${host}" is (0\\.0\\.0\\.0|::), every interface`)],
      never: [/tempo-rl ui: http/],
    }),
  ),
  {
    kind: 'ui --host of a name that does not resolve: a sentence, before any server starts',
    args: async () => [
      'ui',
      '--host',
      'nosuch.invalid',
      ...set(`server.port=${await freePort()}`, `server.ui_port=${await freePort()}`),
    ],
    exit: 2,
    maxSeconds: 20,
    says: [/--host "nosuch\.invalid": no such host/],
    never: [/Temporal server started/],
  },
  // ── report: its run id names a folder, its --out a file
  {
    kind: 'report of a run id that climbs out of the runs folder',
    args: () => ['report', `../../${path.basename(fresh('outside'))}`],
    exit: 2,
    says: [/run id "\.\.\/\.\.\/outside-\d+"/],
  },
  {
    kind: 'report --out under /proc',
    args: () => ['report', 'r1', '--out', '/proc/nope/x.html'],
    exit: 2,
    maxSeconds: 20,
    says: [/\/proc\/nope\/x\.html/, /virtual filesystem/],
  },
  ...(() => {
    let mine = '';
    return [
      {
        kind: 'report --out an existing file',
        args: () => ['report', 'r1', '--out', (mine = file('mine.html', '<p>mine</p>'))],
        keeps: () => path.dirname(mine),
        exit: 2,
        says: [/mine\.html": exists and is not a report tempo-rl wrote/],
      },
      {
        kind: 'report --out an earlier report without --force',
        args: () => [
          'report',
          'r1',
          '--out',
          (mine = file(
            'old.html',
            '<!doctype html><html><head><meta charset="utf-8"><meta name="generator" content="tempo-rl report"><title>tempo-rl run r0</title>',
          )),
        ],
        keeps: () => path.dirname(mine),
        exit: 2,
        says: [/old\.html exists; pass --force to overwrite it/],
      },
    ];
  })(),
  ...(() => {
    const d = fresh('report');
    return [
      {
        kind: 'report of a run with a malformed metrics line names the file and line',
        args: () => {
          mkdirSync(path.join(d, 'runs', 'r1'), { recursive: true });
          writeFileSync(path.join(d, 'runs', 'r1', 'metrics.jsonl'), '{"step": 0}\n[1, 2\n');
          return ['report', 'r1', ...set(`state_dir=${d}`)];
        },
        exit: 1,
        says: [/metrics\.jsonl line 2 is not JSON/],
      },
    ];
  })(),
  // ── bin/tempo-rl through a link on PATH, run from anywhere
  {
    kind: 'bin/tempo-rl through a symlink, from a folder outside the checkout',
    args: () => ['--help'],
    exit: 0,
    via: () => {
      const d = fresh('elsewhere');
      symlinkSync(BIN, path.join(d, 'tempo-rl'));
      return { bin: path.join(d, 'tempo-rl'), cwd: d };
    },
  },

  // ── outputs: never delete or overwrite what tempo-rl did not write
  ...(() => {
    const rows: CliRow[] = [];
    let dir = '';
    rows.push({
      kind: 'model tiny --out a folder of user files',
      args: () => ['model', 'tiny', '--out', (dir = userDir())],
      keeps: () => dir,
      exit: 2,
      says: [/is not empty/, /user-\d+/],
    });
    let model = '';
    rows.push({
      kind: 'model tiny --out a model of another seed',
      args: () => ['model', 'tiny', '--out', (model = fakeTinyModel(0)), '--seed', '1'],
      keeps: () => model,
      exit: 2,
      says: [/seed 0, not seed 1/, /--force/],
    });
    rows.push({
      kind: 'model tiny --out under /proc',
      args: () => ['model', 'tiny', '--out', '/proc/tempo-rl-model'],
      exit: 2,
      maxSeconds: 20,
      says: [/\/proc\/tempo-rl-model/, /virtual filesystem/],
    });
    let user2 = '';
    rows.push({
      kind: 'data synth --out a folder of user files',
      args: () => ['data', 'synth', '--out', (user2 = userDir()), '--n', '2'],
      keeps: () => user2,
      exit: 2,
      says: [/user-\d+/, /not written by tempo-rl/],
    });
    rows.push({
      kind: 'data synth --out an earlier dataset without --force',
      args: () => ['data', 'synth', '--out', synthDir, '--n', '2', '--seed', '9'],
      keeps: () => synthDir,
      exit: 2,
      says: [/synth-\d+/, /--force/],
    });
    rows.push({
      kind: 'data synth --out under /proc',
      args: () => ['data', 'synth', '--out', '/proc/tempo-rl-synth', '--n', '2'],
      exit: 2,
      maxSeconds: 20,
      says: [/\/proc\/tempo-rl-synth/, /virtual filesystem/],
    });
    let plain = '';
    rows.push({
      kind: 'data synth --out a file',
      args: () => ['data', 'synth', '--out', (plain = file('notes.txt', 'mine')), '--n', '2'],
      keeps: () => path.dirname(plain),
      exit: 2,
      says: [/notes\.txt is a file/],
    });
    let under = '';
    rows.push({
      kind: 'data synth --out below a file',
      args: () => ['data', 'synth', '--out', path.join((under = file('notes.txt', 'mine')), 'sub'), '--n', '2'],
      keeps: () => path.dirname(under),
      exit: 2,
      says: [/notes\.txt is a file/],
    });
    rows.push({
      kind: 'data sft-export --out under /proc',
      args: () => ['data', 'sft-export', '--out', '/proc/tempo-rl/x.jsonl'],
      exit: 2,
      maxSeconds: 20,
      says: [/\/proc\/tempo-rl\/x\.jsonl/, /virtual filesystem/],
    });
    let existing = '';
    rows.push({
      kind: 'data sft-export --out an existing file',
      args: () => ['data', 'sft-export', '--out', (existing = file('mine.jsonl', '{"keep": true}\n'))],
      keeps: () => path.dirname(existing),
      exit: 2,
      says: [/mine\.jsonl": exists and is not an SFT JSONL file tempo-rl wrote/],
    });
    return rows;
  })(),

  // ── outputs that are not regular files tempo-rl wrote: refused whatever --force says
  ...(() => {
    const rows: CliRow[] = [];
    const pack = (...args: string[]) => ['pack', 'offline', '--no-wheels', '--compression', 'none', ...args];
    let linkDir = '';
    rows.push({
      kind: 'pack offline --out a symbolic link --force',
      args: () => {
        linkDir = fresh('links');
        writeFileSync(path.join(linkDir, 'mine.txt'), 'my only copy');
        symlinkSync(path.join(linkDir, 'mine.txt'), path.join(linkDir, 'out.tar'));
        return pack('--out', path.join(linkDir, 'out.tar'), '--force');
      },
      keeps: () => linkDir,
      exit: 2,
      maxSeconds: 30,
      says: [/out\.tar": is a symbolic link \(to .*mine\.txt\)/],
      check: () => assert.ok(lstatSync(path.join(linkDir, 'out.tar')).isSymbolicLink(), 'the link was replaced'),
    });
    rows.push({
      kind: 'pack offline --out /dev/stdout: refused without suggesting --force',
      args: () => pack('--out', '/dev/stdout'),
      exit: 2,
      maxSeconds: 30,
      says: [/--out "\/dev\/stdout": is a symbolic link/],
      never: [/--force/],
    });
    let devDir = '';
    rows.push({
      kind: "pack offline --out a character device (mknod c 1 3, /dev/null's numbers) --force",
      args: () => {
        devDir = fresh('dev');
        // a device node needs root; a FIFO stands for it elsewhere
        const made = spawnSync('mknod', [path.join(devDir, 'null'), 'c', '1', '3']).status === 0;
        if (!made) spawnSync('mkfifo', [path.join(devDir, 'null')]);
        return pack('--out', path.join(devDir, 'null'), '--force');
      },
      exit: 2,
      maxSeconds: 30,
      says: [
        /null": is a (character device|FIFO \(named pipe\)); regular files tempo-rl wrote are the only thing it replaces/,
      ],
      check: () => assert.ok(!lstatSync(path.join(devDir, 'null')).isFile(), 'the device node was replaced'),
    });
    let theirs = '';
    rows.push({
      kind: 'pack offline --out a file tempo-rl did not write --force',
      args: () => pack('--out', (theirs = file('notes.tar', 'my only copy')), '--force'),
      keeps: () => path.dirname(theirs),
      exit: 2,
      maxSeconds: 30,
      says: [/notes\.tar": exists and is not an offline pack tempo-rl wrote/],
    });
    rows.push({
      kind: 'pack offline --out DIR/ (a folder)',
      args: () => pack('--out', `${fresh('outdir')}/`),
      exit: 2,
      says: [/outdir-\d+\/": names a folder/],
    });
    rows.push({
      kind: 'pack offline --node a FIFO: refused at once',
      args: () => pack('--out', path.join(fresh('packout'), 'p.tar'), '--node', fifo('node')),
      exit: 2,
      maxSeconds: 20,
      says: [/--node .*fifo-\d+\/node: it is a FIFO \(named pipe\)/],
    });
    rows.push({
      kind: 'pack offline --python-version 3.99',
      args: () => pack('--out', path.join(fresh('packout'), 'p.tar'), '--python-version', '3.99'),
      exit: 2,
      says: [/--python-version 3\.99: the trainer runs on CPython 3\.11 or 3\.12/],
    });
    rows.push({
      kind: 'pack offline --leave-out a name with a space',
      args: () => ['pack', 'offline', '--out', path.join(fresh('packout'), 'p.tar'), '--leave-out', 'z3 solver'],
      exit: 2,
      says: [/--leave-out: a distribution name, or a prefix ending in \* \(nvidia-\*\), given "z3 solver"/],
    });
    rows.push({
      kind: 'pack offline --leave-out with --no-wheels',
      args: () => pack('--out', path.join(fresh('packout'), 'p.tar'), '--leave-out', 'nvidia-*'),
      exit: 2,
      says: [/--no-wheels leaves out every wheel; drop --wheel, --host-packages and --leave-out/],
    });
    rows.push({
      kind: 'pack offline --glibc 2.99',
      args: () => pack('--out', path.join(fresh('packout'), 'p.tar'), '--glibc', '2.99'),
      exit: 2,
      says: [/--glibc: expected the host's glibc as 2\.N, from 2\.28 .* given "2\.99"/],
    });
    let sftLink = '';
    rows.push({
      kind: 'data sft-export --out a symbolic link --force',
      args: () => {
        sftLink = fresh('sftlink');
        writeFileSync(path.join(sftLink, 'mine.jsonl'), '{"keep": true}\n');
        symlinkSync(path.join(sftLink, 'mine.jsonl'), path.join(sftLink, 'out.jsonl'));
        return ['data', 'sft-export', '--out', path.join(sftLink, 'out.jsonl'), '--force'];
      },
      keeps: () => sftLink,
      exit: 2,
      says: [/out\.jsonl": is a symbolic link/],
    });
    let notSft = '';
    rows.push({
      kind: 'data sft-export --out a JSONL file of the user --force',
      args: () => ['data', 'sft-export', '--out', (notSft = file('mine.jsonl', '{"keep": true}\n')), '--force'],
      keeps: () => path.dirname(notSft),
      exit: 2,
      says: [/mine\.jsonl": exists and is not an SFT JSONL file tempo-rl wrote/],
    });
    rows.push({
      kind: 'data synth --out "" (not the working directory)',
      args: () => ['data', 'synth', '--out', '', '--n', '2'],
      exit: 2,
      says: [/--out "": empty/],
    });
    rows.push({
      kind: 'data sft-export --out "" (not the working directory)',
      args: () => ['data', 'sft-export', '--out', ''],
      exit: 2,
      says: [/--out "": empty/],
    });
    let htmlDir = '';
    rows.push({
      kind: 'report --out an HTML page of the user --force',
      args: () => {
        htmlDir = fresh('html');
        writeFileSync(path.join(htmlDir, 'index.html'), '<!doctype html><p>mine</p>');
        return ['report', 'r1', '--out', path.join(htmlDir, 'index.html'), '--force'];
      },
      keeps: () => htmlDir,
      exit: 2,
      says: [/index\.html": exists and is not a report tempo-rl wrote/],
    });
    return rows;
  })(),

  // ── files tempo-rl reads that are FIFOs: refused at once, never waited on
  ...(() => {
    const d = fresh('fifo-run');
    return [
      {
        kind: 'report of a run whose metrics.jsonl is a FIFO',
        args: () => {
          mkdirSync(path.join(d, 'runs', 'r1'), { recursive: true });
          spawnSync('mkfifo', [path.join(d, 'runs', 'r1', 'metrics.jsonl')]);
          return ['report', 'r1', ...set(`state_dir=${d}`)];
        },
        exit: 2,
        maxSeconds: 20,
        says: [/runs\/r1\/metrics\.jsonl: it is a FIFO \(named pipe\), not a regular file/],
      },
    ];
  })(),
  {
    kind: 'data sft-export of a dataset folder whose train.jsonl is a FIFO',
    args: () => [
      'data',
      'sft-export',
      '--out',
      path.join(fresh('sftout'), 'x.jsonl'),
      ...set('dataset.kind=geo3k_dir', `dataset.path=${path.dirname(fifo('train.jsonl'))}`),
    ],
    exit: 1,
    maxSeconds: 20,
    says: [/train\.jsonl: it is a FIFO \(named pipe\), not a regular file/],
  },
  {
    kind: 'score with a response on stdin above the bound',
    args: () => ['score', '--label', '3'],
    stdinFile: () => file('big.txt', Buffer.alloc(65 * 1024 * 1024, 0x61)),
    exit: 2,
    maxSeconds: 30,
    says: [/stdin: more than 64 MiB/],
  },
  {
    kind: 'a config with a bad byte names that byte, not the one after it',
    args: () =>
      check(
        yaml(Buffer.concat([Buffer.from('rollout:\n  max_turns: 2 # caf'), Buffer.from([0xe9]), Buffer.from('\n')])),
      ),
    exit: 2,
    says: [/not valid UTF-8: byte 0xe9 at offset 29/],
  },

  // ── the embedded server
  portTakenRow('ui_port'),
  portTakenRow('port'),

  // ── episodes (these start the embedded server for the look-up, and stop it)
  {
    kind: 'episodes list of a run that does not exist',
    args: async () => [
      'episodes',
      'list',
      'NORUN',
      ...set(`server.port=${await freePort()}`, `server.ui_port=${await freePort()}`),
    ],
    exit: 1,
    says: [/no run "NORUN"/, /run\/NORUN/],
  },
  {
    kind: 'episodes show with the workflow id form',
    args: async () => [
      'episodes',
      'show',
      'episode/NORUN/0/0/0',
      ...set(`server.port=${await freePort()}`, `server.ui_port=${await freePort()}`),
    ],
    exit: 1,
    says: [/no episode "NORUN\/0\/0\/0"/],
    check: (r) => assert.doesNotMatch(r.stderr, /episode\/episode\//),
  },
];

describe('bad input on the command line', { concurrency: Math.max(2, os.availableParallelism()) }, () => {
  test('setup: an earlier synthetic dataset', async () => {
    synthDir = path.join(fresh('synth'), 'ds');
    await writeSyntheticDataset(synthDir, 2, 1);
  });
  for (const row of CLI_ROWS) {
    test(row.kind, async () => {
      while (!synthDir) await new Promise((r) => setTimeout(r, 50));
      const args = await row.args();
      const keep = row.keeps?.();
      const before = keep ? snapshot(keep) : null;
      let r: CliResult;
      try {
        r = await runCli(args, {
          env: row.env,
          stdoutFile: row.stdoutFile,
          stdinFile: row.stdinFile?.(),
          ...row.via?.(),
        });
      } finally {
        await row.cleanup?.();
      }
      const shown = `tempo-rl ${args.join(' ')} → exit ${r.status}\nstderr: ${r.stderr.slice(0, 2000)}`;
      assert.equal(r.status, row.exit, shown);
      for (const re of row.says ?? []) assert.match(r.stderr, re, shown);
      for (const re of row.never ?? []) assert.doesNotMatch(r.stderr + r.stdout, re, `shown: ${shown}`);
      if (row.exit !== 0) assert.doesNotMatch(r.stderr, /^\s+at .+:\d+:\d+\)?$/m, `a stack trace: ${shown}`);
      if (keep) assert.deepEqual(snapshot(keep), before, `files changed under ${keep}`);
      if (row.maxSeconds) assert.ok(r.seconds < row.maxSeconds, `took ${r.seconds.toFixed(1)} s`);
      row.check?.(r);
    });
  }
});
