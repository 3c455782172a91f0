// Bad input on the command line, table-driven: configs, flags, output folders, the server. Each row
// says the exit code, that the message names the thing and its value, and that nothing on disk was
// lost or overwritten. Rows run bin/tempo-rl as a subprocess, two at a time. (In-process rows:
// bad-input.test.ts.)
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { writeSyntheticDataset } from '../../lib/data/synth.js';
import { cacheDir, REPO_ROOT } from '../../lib/paths.js';
import { stopServer } from '../../lib/server.js';
import { BIN, file, fresh, freePort, occupy, snapshot, tmp } from './support/bad-input.js';

// The environment of a CLI row: a temp HOME and state dir, no TEMPORAL_* / TEMPO_RL__* / HF_* leaking in.
const baseEnv: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries(process.env).filter(([k]) => !/^(TEMPORAL_|TEMPO_RL__|TEMPO_RL_(MODEL|DATASET|NUM_GPUS|STATE_DIR)$|HF_)/.test(k)),
);
const cache = cacheDir();

interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
  seconds: number;
}

function runCli(args: string[], opts: { env?: Record<string, string>; stdoutFile?: string; timeoutMs?: number; state?: string; bin?: string; cwd?: string } = {}): Promise<CliResult> {
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
    const child = spawn(opts.bin ?? BIN, args, { env, stdio: ['ignore', stdout, 'pipe'], cwd: opts.cwd });
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
  /** A folder whose files must be byte-for-byte the same afterwards. */
  keeps?: () => string;
  stdoutFile?: string;
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
  writeFileSync(path.join(d, 'tempo_rl_tiny.json'), JSON.stringify({ seed, generator: 'trainer.tiny_model' }));
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
      assert.equal(await stopServer(loadConfig({ env: {}, sets: [`state_dir=${state}`] })), false, 'a server was started');
    },
  };
}

const tlsEnabled = (r: CliResult) => JSON.parse(r.stdout).temporal.tls.enabled as boolean;

const CLI_ROWS: CliRow[] = [
  // ── config: values the trainer cannot honour or that make no sense (exit 2, key and value named)
  { kind: 'server.port equals server.ui_port', args: () => check(...set('server.port=7300', 'server.ui_port=7300')), exit: 2, says: [/server\.ui_port/, /7300/] },
  { kind: 'n_samples_per_prompt 1 (advantage always 0)', args: () => check(...set('rollout.n_samples_per_prompt=1')), exit: 2, says: [/rollout\.n_samples_per_prompt/, /number 1/] },
  { kind: 'engines.max_model_len below rollout.max_context_len', args: () => check(...set('engines.max_model_len=1024')), exit: 2, says: [/engines\.max_model_len/, /1024/, /4096/] },
  { kind: 'engine URL ftp:', args: () => check(...set('engines.urls=["ftp://h/x"]')), exit: 2, says: [/engines\.urls\.0/, /ftp:\/\/h\/x/] },
  { kind: 'engine URL javascript:', args: () => check(...set('engines.urls=["javascript:alert(1)"]')), exit: 2, says: [/engines\.urls\.0/, /javascript:alert/] },
  { kind: 'engine URL file:', args: () => check(...set('engines.urls=["file:///etc/passwd"]')), exit: 2, says: [/engines\.urls\.0/, /file:\/\/\/etc\/passwd/] },
  { kind: 'engine URL not a URL', args: () => check(...set('engines.urls=["localhost 8000"]')), exit: 2, says: [/engines\.urls\.0/, /localhost 8000/] },
  { kind: 'TEMPORAL_TLS=yes means TLS on', args: () => check(), env: { TEMPORAL_TLS: 'yes' }, exit: 0, check: (r) => assert.equal(tlsEnabled(r), true) },
  { kind: 'TEMPORAL_TLS=TRUE means TLS on', args: () => check(), env: { TEMPORAL_TLS: 'TRUE' }, exit: 0, check: (r) => assert.equal(tlsEnabled(r), true) },
  { kind: 'TEMPORAL_TLS=on means TLS on', args: () => check(), env: { TEMPORAL_TLS: 'on' }, exit: 0, check: (r) => assert.equal(tlsEnabled(r), true) },
  { kind: 'TEMPORAL_TLS=Off means TLS off', args: () => check(), env: { TEMPORAL_TLS: 'Off' }, exit: 0, check: (r) => assert.equal(tlsEnabled(r), false) },
  { kind: 'TEMPORAL_TLS=maybe', args: () => check(), env: { TEMPORAL_TLS: 'maybe' }, exit: 2, says: [/TEMPORAL_TLS/, /"maybe"/] },
  { kind: 'non-UTF-8 bytes in the YAML', args: () => check(yaml(Buffer.concat([Buffer.from('rollout:\n  max_turns: 2 # caf'), Buffer.from([0xe9]), Buffer.from('\n')]))), exit: 2, says: [/c\.yaml/, /not valid UTF-8/, /0x/] },
  { kind: 'max_turns 1e12', args: () => check(...set('rollout.max_turns=1e12')), exit: 2, says: [/rollout\.max_turns/, /1000000000000/] },
  { kind: 'max_response_len above max_context_len', args: () => check(...set('rollout.max_response_len=5000')), exit: 2, says: [/rollout\.max_response_len/, /5000/, /max_context_len/] },
  { kind: 'eps_clip_high below eps_clip', args: () => check(...set('grpo.eps_clip_high=0.1')), exit: 2, says: [/grpo\.eps_clip_high/, /0\.1/] },
  { kind: 'eval every k steps with 0 eval prompts', args: () => check(...set('run.eval_interval=2', 'run.eval_prompts=0')), exit: 2, says: [/run\.eval_prompts/, /number 0/] },
  { kind: 'model.dtype float16 (no loss scaling)', args: () => check(...set('model.dtype=float16')), exit: 2, says: [/model\.dtype/, /float16/, /bfloat16/] },
  { kind: 'model.num_gpus 8 with a standby trainer', args: () => check(...set('model.num_gpus=8')), exit: 2, says: [/run\.trainer_standbys/, /model\.num_gpus/, /\(8\)/] },
  { kind: 'TEMPO_RL_NUM_GPUS=8 with a standby trainer', args: () => check(), env: { TEMPO_RL_NUM_GPUS: '8' }, exit: 2, says: [/run\.trainer_standbys/, /model\.num_gpus/] },
  { kind: 'model.num_gpus 8 without standbys is honoured', args: () => check(...set('model.num_gpus=8', 'run.trainer_standbys=0')), exit: 0 },
  { kind: 'model.num_gpus -1', args: () => check(...set('model.num_gpus=-1')), exit: 2, says: [/model\.num_gpus/, /-1/] },
  { kind: 'run.checkpoint_interval 0', args: () => check(...set('run.checkpoint_interval=0')), exit: 2, says: [/run\.checkpoint_interval/, /number 0/] },
  { kind: 'run.checkpoint_interval 20 is honoured', args: () => check(...set('run.checkpoint_interval=20')), exit: 0 },
  { kind: 'keep_checkpoint_every not a multiple of the interval', args: () => check(...set('run.checkpoint_interval=4', 'run.keep_checkpoints=2', 'run.keep_checkpoint_every=6')), exit: 2, says: [/run\.keep_checkpoint_every/, /multiple of run\.checkpoint_interval \(4\)/] },
  { kind: 'keep_checkpoint_every without keep_checkpoints', args: () => check(...set('run.keep_checkpoint_every=4')), exit: 2, says: [/run\.keep_checkpoint_every/, /needs run\.keep_checkpoints > 0/] },
  { kind: '--set __proto__.x=1', args: () => check(...set('__proto__.polluted=1')), exit: 2, says: [/"__proto__"/] },
  { kind: '--set constructor.prototype.x=1', args: () => check(...set('constructor.prototype.x=1')), exit: 2, says: [/"constructor"/] },
  { kind: '__proto__ key in the YAML', args: () => check(yaml('__proto__:\n  polluted: 1\n')), exit: 2, says: [/c\.yaml/, /"__proto__"/] },
  { kind: 'an empty config file warns', args: () => check(yaml('# nothing here\n')), exit: 0, says: [/c\.yaml is empty; using the defaults/] },
  { kind: 'misspelled key', args: () => check(yaml('rollout:\n  max_trns: 2\n')), exit: 2, says: [/rollout\.max_trns: unknown key — did you mean "max_turns"/] },
  { kind: 'wrong type', args: () => check(...set('rollout.temperature=hot')), exit: 2, says: [/rollout\.temperature/, /"hot"/] },
  { kind: 'top_p 0', args: () => check(...set('rollout.top_p=0')), exit: 2, says: [/rollout\.top_p/, /number 0/] },
  { kind: 'missing config file', args: () => check(path.join(tmp, 'nope.yaml')), exit: 2, says: [/cannot read .*nope\.yaml/] },
  { kind: 'a YAML list at the top', args: () => check(yaml('- a\n- b\n')), exit: 2, says: [/c\.yaml/, /mapping/, /an array/] },
  { kind: 'invalid YAML', args: () => check(yaml('rollout: [1, 2\n')), exit: 2, says: [/c\.yaml is not valid YAML/] },
  { kind: '--set without =', args: () => check(...set('rollout.max_turns')), exit: 2, says: [/--set "rollout\.max_turns"/] },
  { kind: 'TEMPO_RL__ROLLOUT__MAX_TURNS=abc', args: () => check(), env: { TEMPO_RL__ROLLOUT__MAX_TURNS: 'abc' }, exit: 2, says: [/rollout\.max_turns/, /"abc"/] },
  { kind: 'geo3k multi-turn config passes check', args: () => check(path.join(REPO_ROOT, 'configs/geo3k-multiturn-qwen3vl-2b.yaml')), exit: 0 },
  { kind: 'geo3k single-turn config passes check', args: () => check(path.join(REPO_ROOT, 'configs/geo3k-singleturn-qwen3vl-2b.yaml')), exit: 0 },
  { kind: 'geo3k single-turn Qwen3.5-35B-A3B config passes check', args: () => check(path.join(REPO_ROOT, 'configs/geo3k-singleturn-qwen35-35b-a3b.yaml')), exit: 0 },

  // ── command line
  { kind: 'bare tempo-rl: help, exit 2', args: () => [], exit: 2, says: [/Usage: tempo-rl/] },
  { kind: 'a group without its subcommand', args: () => ['data'], exit: 2, says: [/Usage: tempo-rl data/] },
  { kind: 'unknown command', args: () => ['trian'], exit: 2, says: [/unknown command 'trian'/] },
  { kind: '--help exits 0', args: () => ['--help'], exit: 0 },
  { kind: 'stdout on a full disk', args: () => check(), stdoutFile: '/dev/full', exit: 1, says: [/cannot write to stdout/, /ENOSPC/], check: (r) => assert.doesNotMatch(r.stderr, /\n\s+at /) },
  { kind: 'model tiny --seed abc', args: () => ['model', 'tiny', '--seed', 'abc'], exit: 2, says: [/seed/, /"abc"/] },
  { kind: 'data synth --n abc', args: () => ['data', 'synth', '--out', path.join(tmp, 'never'), '--n', 'abc'], exit: 2, says: [/--n/, /abc/] },
  { kind: 'sft-transcripts --per-row 0', args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--per-row', '0'], exit: 2, says: [/--per-row/, /given "0"/] },
  { kind: 'sft-transcripts --habit-recheck without --habit', args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--habit-recheck', '0.5'], exit: 2, says: [/--habit-recheck/, /--habit A,B/] },
  { kind: 'sft-transcripts --habit-share 2', args: () => ['data', 'sft-transcripts', '--out', path.join(tmp, 'never.jsonl'), '--habit-share', '2'], exit: 2, says: [/--habit-share/, /"2"/] },
  { kind: 'sft-export --split test', args: () => ['data', 'sft-export', '--out', path.join(tmp, 'never.jsonl'), '--split', 'test'], exit: 2, says: [/--split "test"/] },
  { kind: 'episodes list --step x', args: () => ['episodes', 'list', 'r1', '--step', 'x'], exit: 2, says: [/--step "x"/] },
  { kind: 'data download of an unknown dataset', args: () => ['data', 'download', 'mnist', '--out', path.join(tmp, 'never')], exit: 2, says: [/unknown dataset mnist/] },
  { kind: 'HF_ENDPOINT "not a url"', args: () => ['data', 'download', 'geo3k', '--out', path.join(tmp, 'never')], env: { HF_ENDPOINT: 'not a url' }, exit: 2, says: [/HF_ENDPOINT/, /"not a url"/] },
  { kind: 'status RUN with no server: fast, names the address', args: async () => ['status', 'r1', ...set(`server.port=${await freePort()}`)], exit: 1, maxSeconds: 8, says: [/no Temporal server answers at 127\.0\.0\.1:\d+/] },
  { kind: 'pause RUN with no server at TEMPORAL_ADDRESS', args: () => ['pause', 'r1'], env: { TEMPORAL_ADDRESS: '127.0.0.1:1' }, exit: 1, maxSeconds: 8, says: [/127\.0\.0\.1:1 /, /TEMPORAL_ADDRESS/] },

  // ── report: its run id names a folder, its --out a file
  { kind: 'report of a run id that climbs out of the runs folder', args: () => ['report', `../../${path.basename(fresh('outside'))}`], exit: 2, says: [/run id "\.\.\/\.\.\/outside-\d+"/] },
  { kind: 'report --out under /proc', args: () => ['report', 'r1', '--out', '/proc/nope/x.html'], exit: 2, maxSeconds: 20, says: [/\/proc\/nope\/x\.html/, /virtual filesystem/] },
  ...(() => {
    let mine = '';
    return [{ kind: 'report --out an existing file', args: () => ['report', 'r1', '--out', (mine = file('mine.html', '<p>mine</p>'))], keeps: () => path.dirname(mine), exit: 2, says: [/mine\.html exists/, /--force/] }];
  })(),
  ...(() => {
    const d = fresh('report');
    return [{
      kind: 'report of a run with a malformed metrics line names the file and line', args: () => {
        mkdirSync(path.join(d, 'runs', 'r1'), { recursive: true });
        writeFileSync(path.join(d, 'runs', 'r1', 'metrics.jsonl'), '{"step": 0}\n[1, 2\n');
        return ['report', 'r1', ...set(`state_dir=${d}`)];
      },
      exit: 1, says: [/metrics\.jsonl line 2 is not JSON/],
    }];
  })(),
  // ── bin/tempo-rl through a link on PATH, run from anywhere
  {
    kind: 'bin/tempo-rl through a symlink, from a folder outside the checkout', args: () => ['--help'], exit: 0,
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
    rows.push({ kind: 'model tiny --out a folder of user files', args: () => ['model', 'tiny', '--out', (dir = userDir())], keeps: () => dir, exit: 2, says: [/is not empty/, /user-\d+/] });
    let model = '';
    rows.push({ kind: 'model tiny --out a model of another seed', args: () => ['model', 'tiny', '--out', (model = fakeTinyModel(0)), '--seed', '1'], keeps: () => model, exit: 2, says: [/seed 0, not 1/, /--force/] });
    rows.push({ kind: 'model tiny --out under /proc', args: () => ['model', 'tiny', '--out', '/proc/tempo-rl-model'], exit: 2, maxSeconds: 20, says: [/\/proc\/tempo-rl-model/, /virtual filesystem/] });
    let user2 = '';
    rows.push({ kind: 'data synth --out a folder of user files', args: () => ['data', 'synth', '--out', (user2 = userDir()), '--n', '2'], keeps: () => user2, exit: 2, says: [/user-\d+/, /not written by tempo-rl/] });
    rows.push({ kind: 'data synth --out an earlier dataset without --force', args: () => ['data', 'synth', '--out', synthDir, '--n', '2', '--seed', '9'], keeps: () => synthDir, exit: 2, says: [/synth-\d+/, /--force/] });
    rows.push({ kind: 'data synth --out under /proc', args: () => ['data', 'synth', '--out', '/proc/tempo-rl-synth', '--n', '2'], exit: 2, maxSeconds: 20, says: [/\/proc\/tempo-rl-synth/, /virtual filesystem/] });
    let plain = '';
    rows.push({ kind: 'data synth --out a file', args: () => ['data', 'synth', '--out', (plain = file('notes.txt', 'mine')), '--n', '2'], keeps: () => path.dirname(plain), exit: 2, says: [/notes\.txt is a file/] });
    let under = '';
    rows.push({ kind: 'data synth --out below a file', args: () => ['data', 'synth', '--out', path.join((under = file('notes.txt', 'mine')), 'sub'), '--n', '2'], keeps: () => path.dirname(under), exit: 2, says: [/notes\.txt is a file/] });
    rows.push({ kind: 'data sft-export --out under /proc', args: () => ['data', 'sft-export', '--out', '/proc/tempo-rl/x.jsonl'], exit: 2, maxSeconds: 20, says: [/\/proc\/tempo-rl\/x\.jsonl/, /virtual filesystem/] });
    let existing = '';
    rows.push({ kind: 'data sft-export --out an existing file', args: () => ['data', 'sft-export', '--out', (existing = file('mine.jsonl', '{"keep": true}\n'))], keeps: () => path.dirname(existing), exit: 2, says: [/mine\.jsonl exists/, /--force/] });
    return rows;
  })(),

  // ── the embedded server
  portTakenRow('ui_port'),
  portTakenRow('port'),

  // ── episodes (these start the embedded server for the look-up, and stop it)
  { kind: 'episodes list of a run that does not exist', args: async () => ['episodes', 'list', 'NORUN', ...set(`server.port=${await freePort()}`, `server.ui_port=${await freePort()}`)], exit: 1, says: [/no run "NORUN"/, /run\/NORUN/] },
  {
    kind: 'episodes show with the workflow id form',
    args: async () => ['episodes', 'show', 'episode/NORUN/0/0/0', ...set(`server.port=${await freePort()}`, `server.ui_port=${await freePort()}`)],
    exit: 1,
    says: [/no episode "NORUN\/0\/0\/0"/],
    check: (r) => assert.doesNotMatch(r.stderr, /episode\/episode\//),
  },
];

describe('bad input on the command line', { concurrency: 2 }, () => {
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
        r = await runCli(args, { env: row.env, stdoutFile: row.stdoutFile, ...row.via?.() });
      } finally {
        await row.cleanup?.();
      }
      const shown = `tempo-rl ${args.join(' ')} → exit ${r.status}\nstderr: ${r.stderr.slice(0, 2000)}`;
      assert.equal(r.status, row.exit, shown);
      for (const re of row.says ?? []) assert.match(r.stderr, re, shown);
      if (row.exit !== 0) assert.doesNotMatch(r.stderr, /^\s+at .+:\d+:\d+\)?$/m, `a stack trace: ${shown}`);
      if (keep) assert.deepEqual(snapshot(keep), before, `files changed under ${keep}`);
      if (row.maxSeconds) assert.ok(r.seconds < row.maxSeconds, `took ${r.seconds.toFixed(1)} s`);
      row.check?.(r);
    });
  }
});

