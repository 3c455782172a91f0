// Kill-and-resume certification (docs/certification.md): a deterministic run (run.deterministic) with
// SIGKILLs at named points — inside the rollout worker and the trainer through their kill points
// (supervise/kill-points.ts), the Temporal server from outside — whose dead processes are started again
// until it finishes; then the finished run's fingerprint (episode ids, every sample's tokens, logprobs
// and reward, each step's metrics, the final weights) against an uninterrupted reference run's.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import type { TempoConfig } from '../config/schema.js';
import { runHandle, runProgress } from '../client/run-client.js';
import { openConfiguredBlobStore } from '../lib/blob-store-config.js';
import { connectClient } from '../supervise/temporal.js';
import { episodeWorkflowId } from '../protocol/episode.js';
import { type RunResult, trainingRunWorkflowId } from '../protocol/training-run.js';
import { recordHistory, recordHistoryChain } from './history-fixtures.js';
import { readStepRecords } from '../activities/run.js';
import { KILL_AT_ENV, type KillPoint } from '../supervise/kill-points.js';
import { serverStatus, startServer } from '../supervise/server.js';
import { stateLayout } from '../stores/layout.js';
import type { TestEngines } from './engines.js';
import { checkExactlyOnce, startRunFixture, startWhenReady, type RunFixture } from './run.js';
import { StartUpDeaths } from './start-up-deaths.js';

/** A kill at a point of a worker's code: `who` names the process kind that reaches the point; `server`:
 *  that process SIGKILLs the Temporal server there instead of itself. */
export type WorkerKill = Omit<KillPoint, 'once' | 'nth' | 'pid_file'> & {
  nth?: number;
  who: 'rollout' | 'trainer';
  server?: boolean;
};
export interface KillPlan {
  name: string;
  kills: WorkerKill[];
}

export interface Fingerprint {
  steps: Array<{ episodes: string[]; trained: string[]; metrics: Record<string, number> }>;
  /** Episode id → sha256 of its stored sample (tokens, masks, logprobs, reward, turns; engine URLs left out). */
  samples: Record<string, string>;
  /** The same with the engine's logprobs left out too (rollout_logprobs, each turn's mean_logprob): tells
   *  a sample whose tokens, masks and reward differ from one whose engine scored the same tokens otherwise. */
  samplesNoLogprobs: Record<string, string>;
  /** Episode id → the engine's logprob of each response token and its loss mask (1: the model's, 0: an
   *  observation's): where two samples' logprobs part. */
  logprobs?: Record<string, { rollout_logprobs: number[]; loss_mask: number[] }>;
  /** sha256 of the final checkpoint's weights. */
  weights: string;
}

export interface KillOutcome {
  label: string;
  fired: boolean;
  /** SIGKILL → the run moving again (its step, phase or finished episodes changed), in seconds. */
  recovered_s: number | null;
}

export interface CertifiedRun {
  fingerprint: Fingerprint;
  outcomes: KillOutcome[];
  seconds: number;
}

/** Metrics that measure the machine or the recovery itself, not the run: left out of the comparison. */
export function comparedMetric(name: string): boolean {
  return !/^(perf|sync)\//.test(name) && !/(seconds|_time)$/.test(name) && !/^train\/replay/.test(name);
}

export function killLabel(k: WorkerKill): string {
  const at = `${k.point} ${k.phase}${k.after_ms !== undefined ? ` +${k.after_ms}ms` : ''}${k.nth && k.nth > 1 ? ` #${k.nth}` : ''}${k.match ? ` [${k.match}]` : ''}`;
  return k.server ? `server, at ${k.who} ${at}` : `${k.who} ${at}`;
}

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

export async function fingerprint(fx: RunFixture, runId: string): Promise<Fingerprint> {
  const runDir = path.join(fx.cfg.state_dir, 'runs', runId);
  const records = await readStepRecords(runDir);
  const store = await openConfiguredBlobStore(fx.cfg);
  const samples: Record<string, string> = {};
  const samplesNoLogprobs: Record<string, string> = {};
  const logprobs: NonNullable<Fingerprint['logprobs']> = {};
  for (const r of records)
    for (const e of r.episodes) {
      const sample = await store.getJson<{
        turns: Array<Record<string, unknown>>;
        rollout_logprobs?: number[];
        loss_mask?: number[];
      }>(store.namedRef(`samples/${e.episode_id}.json`));
      for (const t of sample.turns) delete t.engine;
      samples[e.episode_id] = sha256(JSON.stringify(sample));
      logprobs[e.episode_id] = { rollout_logprobs: sample.rollout_logprobs ?? [], loss_mask: sample.loss_mask ?? [] };
      delete sample.rollout_logprobs;
      for (const t of sample.turns) delete t.mean_logprob;
      samplesNoLogprobs[e.episode_id] = sha256(JSON.stringify(sample));
    }
  const ckpts = readdirSync(path.join(runDir, 'checkpoints'))
    .filter((n) => /^step-\d+$/.test(n))
    .sort();
  const last = path.join(runDir, 'checkpoints', ckpts[ckpts.length - 1]!);
  const weightFiles = readdirSync(last)
    .filter((n) => n.endsWith('.safetensors'))
    .sort();
  return {
    steps: records.map((r) => ({
      episodes: r.episodes.map((e) => e.episode_id),
      trained: r.episodes.filter((e) => e.trained).map((e) => e.episode_id),
      metrics: Object.fromEntries(Object.entries(r.metrics).filter(([k]) => comparedMetric(k))),
    })),
    samples,
    samplesNoLogprobs,
    logprobs,
    weights: sha256(weightFiles.map((f) => sha256(readFileSync(path.join(last, f)))).join('|')),
  };
}

const ENGINE_LOGPROBS_ONLY = "the engine's logprobs only (same tokens, masks, reward and turns)";
/** The metric that compares the engine's logprobs with the trainer's: it moves with the engine's alone. */
const ENGINE_LOGPROB_METRIC = 'train/train_rollout_logprob_abs_diff';

/** Where two samples' engine logprobs of the same tokens part: how many of the model's tokens differ,
 *  the first of them as turn and token within the turn (a turn: a run of the loss mask's 1s), and the
 *  largest |Δ| — whether the engine parts at a turn's first token (its prompt), at a later turn
 *  (what an earlier turn left), or deep into long answers. */
export function whereLogprobsPart(
  a: { rollout_logprobs: number[]; loss_mask: number[] },
  b: { rollout_logprobs: number[] },
): string {
  let turn = 0;
  let inTurn = -1;
  let first = '';
  let count = 0;
  let model = 0;
  let worst = 0;
  a.loss_mask.forEach((m, i) => {
    if (m !== 1) {
      inTurn = -1;
      return;
    }
    if (inTurn < 0) turn += 1;
    inTurn += 1;
    model += 1;
    const delta = Math.abs((a.rollout_logprobs[i] ?? 0) - (b.rollout_logprobs[i] ?? 0));
    if (delta === 0) return;
    count += 1;
    worst = Math.max(worst, delta);
    first ||= `the first at turn ${turn} token ${inTurn}`;
  });
  return `${count} of ${model} tokens, ${first || 'none'}, max |Δ| ${worst.toPrecision(2)}`;
}

/** Whether every difference is in the engine's logprobs of the same tokens (some samples' logprobs, and
 *  the metric that reads them): the run's tokens, rewards, training and weights are the reference's.
 *  The metric alone moving, with every sample the same, is the trainer's logprobs: not this. */
export function engineLogprobsOnly(diffs: string[]): boolean {
  return (
    diffs.some((d) => d.includes(ENGINE_LOGPROBS_ONLY)) &&
    diffs.every(
      (d) => d.includes(ENGINE_LOGPROBS_ONLY) || (/^step \d+: /.test(d) && d.includes(`: ${ENGINE_LOGPROB_METRIC} `)),
    )
  );
}

/** What differs between two fingerprints, one line each (empty: identical). */
export function differences(ref: Fingerprint, got: Fingerprint): string[] {
  const out: string[] = [];
  if (ref.steps.length !== got.steps.length) out.push(`steps: ${ref.steps.length} vs ${got.steps.length}`);
  ref.steps.forEach((a, i) => {
    const b = got.steps[i];
    if (!b) return;
    if (JSON.stringify(a.episodes) !== JSON.stringify(b.episodes)) out.push(`step ${i}: other episode ids`);
    if (JSON.stringify(a.trained) !== JSON.stringify(b.trained)) out.push(`step ${i}: other trained episodes`);
    for (const k of new Set([...Object.keys(a.metrics), ...Object.keys(b.metrics)]))
      if (!Object.is(a.metrics[k], b.metrics[k])) out.push(`step ${i}: ${k} ${a.metrics[k]} vs ${b.metrics[k]}`);
  });
  for (const id of new Set([...Object.keys(ref.samples), ...Object.keys(got.samples)]))
    if (ref.samples[id] !== got.samples[id])
      out.push(
        ref.samplesNoLogprobs[id] !== undefined && ref.samplesNoLogprobs[id] === got.samplesNoLogprobs[id]
          ? `sample ${id}: ${ENGINE_LOGPROBS_ONLY}${partsAt(ref, got, id)}`
          : `sample ${id}: other content`,
      );
  if (ref.weights !== got.weights) out.push('final weights: other digest');
  return out;
}

function partsAt(ref: Fingerprint, got: Fingerprint, id: string): string {
  const a = ref.logprobs?.[id];
  const b = got.logprobs?.[id];
  return a && b ? `: ${whereLogprobsPart(a, b)}` : '';
}

/** Polls the run's progress, reconnecting across server restarts; notes when it last changed. */
class ProgressWatch {
  changes: number[] = [];
  private key = '';
  private client: Client | null = null;

  constructor(
    private readonly fx: RunFixture,
    private readonly runId: string,
  ) {}

  async poll(): Promise<void> {
    try {
      this.client ??= await connectClient(this.fx.cfg);
      const p = await runProgress(this.client, this.runId);
      const key = `${p.step}|${p.phase}|${p.episodes_done}`;
      if (key !== this.key) {
        this.key = key;
        this.changes.push(Date.now());
      }
    } catch {
      await this.client?.connection.close().catch(() => undefined);
      this.client = null;
    }
  }

  /** Polls until stop(), on its own: a query waits while no worker hosts the run, and the restarts must not. */
  private running: Promise<void> | null = null;
  private stopped = false;
  start(): void {
    this.running = (async () => {
      while (!this.stopped) {
        await this.poll();
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
  }

  recoveredAfter(t: number): number | null {
    const next = this.changes.find((c) => c > t);
    return next === undefined ? null : (next - t) / 1000;
  }

  /** Its last poll first: a connection closed under a call in retry throws from the retry's timer. */
  async close(): Promise<void> {
    this.stopped = true;
    await this.running;
    await this.client?.connection.close().catch(() => undefined);
  }
}

/** Restarts the fixture's workers that died; returns when the run has a result. */
async function superviseUntilDone(fx: RunFixture, runId: string, watch: ProgressWatch) {
  const dead = (c: { exitCode: number | null; signalCode: string | null }) =>
    c.exitCode !== null || c.signalCode !== null;
  let done = false;
  const result = (async () => {
    const client = await connectClient(fx.cfg);
    try {
      for (;;) {
        try {
          return (await runHandle(client, runId).result()) as RunResult;
        } catch (err) {
          // The server is being restarted: its client reconnects by itself.
          const text = `${err} ${(err as { cause?: unknown }).cause ?? ''}`;
          if (!/connect|unavailable|transport|deadline/i.test(text)) throw err;
          await new Promise((r) => setTimeout(r, 500));
        }
      }
    } finally {
      done = true;
      await client.connection.close().catch(() => undefined);
    }
  })();
  result.catch(() => undefined); // awaited below; a worker that cannot start ends the loop first
  watch.start();
  const startUps = new StartUpDeaths();
  while (!done) {
    if (!(await serverStatus(fx.cfg)).running) await startServer(fx.cfg);
    if (dead(fx.rollout)) fx.rollout = startUps.restart('rollout worker', fx.rollout, fx.startRollout);
    fx.trainers.forEach((t, i) => {
      if (dead(t)) fx.trainers[i] = startUps.restart('trainer', t, fx.startTrainer);
    });
    await new Promise((r) => setTimeout(r, 250));
  }
  return result;
}

/** One run of `plan` on its own server and state (the engines are the caller's), checked exactly-once
 *  and fingerprinted. Every run of a certification uses the same run id: its seeds derive from it.
 *  `recordAs`: the name of the replay fixtures its histories become. */
export async function certifyRun(
  engines: TestEngines,
  sets: string[],
  plan: KillPlan,
  opts: { runId?: string; recordAs?: string } = {},
): Promise<CertifiedRun> {
  const runId = opts.runId ?? 'certify';
  const t0 = Date.now();
  const killDir = path.join(process.env.TMPDIR ?? '/tmp', `tempo-rl-kills-${process.pid}-${plan.name}-${t0}`);
  mkdirSync(killDir, { recursive: true });
  const points = plan.kills.map((k, i) => ({ ...k, nth: k.nth ?? 1, once: path.join(killDir, `${i}.fired`) }));
  const forKind = (who: WorkerKill['who']) => (cfg: TempoConfig) => ({
    [KILL_AT_ENV]: JSON.stringify(
      points
        .filter((p) => p.who === who)
        .map(({ who: _, server, ...p }) => (server ? { ...p, pid_file: stateLayout(cfg.state_dir).serverRecord } : p)),
    ),
  });
  const fx = await startRunFixture(['run.deterministic=true', ...sets], engines, {
    workerEnv: forKind('rollout'),
    trainerEnv: forKind('trainer'),
  });
  const watch = new ProgressWatch(fx, runId);
  try {
    await startWhenReady(fx, runId);
    const result = await superviseUntilDone(fx, runId, watch);
    const client = await connectClient(fx.cfg);
    try {
      await checkExactlyOnce(client, fx.cfg, runId, result);
      // A reference run can be the replay fixtures' source (with TEMPO_RL_RECORD_HISTORIES=1).
      if (opts.recordAs) {
        await recordHistoryChain(client, trainingRunWorkflowId(runId), `training-run-certified-${opts.recordAs}`);
        await recordHistory(client, episodeWorkflowId(`${runId}/1/0/0`), `episode-certified-${opts.recordAs}`);
      }
    } finally {
      await client.connection.close().catch(() => undefined);
    }
    // A point's file is created the moment before its SIGKILL.
    const outcomes: KillOutcome[] = points.map((p) => {
      const fired = existsSync(p.once);
      return {
        label: killLabel(p),
        fired,
        recovered_s: fired ? watch.recoveredAfter(statSync(p.once).mtimeMs) : null,
      };
    });
    return { fingerprint: await fingerprint(fx, runId), outcomes, seconds: (Date.now() - t0) / 1000 };
  } finally {
    await watch.close();
    await fx.close();
    rmSync(killDir, { recursive: true, force: true });
  }
}
