// The certification matrix (docs/certification.md): every durable step of a run — render, generate, env
// step, score, store, train, weight sync, checkpoint commit, eval, continue-as-new — killed before it
// starts, half-way and after its work but before its result is recorded, plus the Temporal server in
// three phases; synchronous and with the async window (max_staleness 1). Kills are grouped a few to a
// run (each fires once, at a different point); a run that differs from the reference names its group.
import { certifyRun, differences, type CertifiedRun, type KillPlan, type WorkerKill } from './certify.js';
import type { TestEngines } from './engines.js';
import { SMALL_RUN } from './run.js';

export type Mode = 'sync' | 'async';

/** The run a certification compares: three steps (CI's subset: two), an eval after the second,
 *  continue-as-new after each; `warm`: a warm-started model directory (bench/certify.ts --warm). */
export function certifySets(mode: Mode, steps = 3, warm?: string): string[] {
  return [
    ...SMALL_RUN,
    // A warm-started policy writes calc_score calls: episodes of two turns, so the environment's step
    // and the observation's render run too (the random tiny model runs out of tokens in turn 1).
    ...(warm ? [`model.path=${warm}`, 'rollout.max_response_len=96'] : []),
    `run.steps=${steps}`,
    'run.eval_interval=2',
    'run.eval_prompts=2',
    'run.trainer_standbys=1',
    ...(mode === 'async' ? ['rollout.max_staleness=1', 'grpo.tis.enabled=true'] : []),
  ];
}

const r = (point: string, phase: WorkerKill['phase'], extra: Partial<WorkerKill> = {}): WorkerKill => ({
  who: 'rollout',
  point,
  phase,
  ...extra,
});
const t = (point: string, phase: WorkerKill['phase'], extra: Partial<WorkerKill> = {}): WorkerKill => ({
  who: 'trainer',
  point,
  phase,
  ...extra,
});

/** The whole matrix, a few kills a run. `nth` spreads a run's kills over its steps. */
export function fullMatrix(): KillPlan[] {
  return [
    {
      name: 'render',
      kills: [
        r('renderPrompt', 'start'),
        r('renderPrompt', 'mid', { after_ms: 20, nth: 3 }),
        r('renderPrompt', 'end', { nth: 5 }),
        r('renderObservation', 'end', { nth: 2 }),
      ],
    },
    {
      name: 'generate',
      kills: [
        r('generateTurn', 'start', { nth: 2 }),
        r('generateTurn', 'mid', { after_ms: 60, nth: 4 }),
        r('generateTurn', 'end', { nth: 6 }),
        r('generateTurn', 'mid', { after_ms: 60, nth: 7, server: true }),
      ],
    },
    {
      name: 'env-store',
      kills: [
        r('envStep', 'start', { nth: 2 }),
        r('envStep', 'end', { nth: 4 }),
        r('storeSample', 'start', { nth: 2 }),
        r('storeSample', 'end', { nth: 4 }),
      ],
    },
    {
      // An episode is scored once, at its end: a process killed and started again reaches few scores.
      name: 'score',
      kills: [r('scoreEpisode', 'start'), r('scoreEpisode', 'end', { nth: 2 })],
    },
    {
      name: 'train',
      kills: [
        t('train_step', 'start'),
        t('train_step', 'mid', { after_ms: 400 }),
        t('train_step', 'end'),
        t('train_step', 'mid', { after_ms: 400, nth: 3, server: true }),
      ],
    },
    {
      // Each trainer process counts its own arrivals: the points fire one after another as the
      // processes that take over reach them (the first sync is the run's start).
      name: 'sync',
      kills: [
        t('sync_weights', 'mid', { after_ms: 100 }),
        t('sync_weights', 'end'),
        t('sync_weights', 'start', { nth: 2 }),
        t('sync_weights', 'mid', { after_ms: 100, nth: 2, server: true }),
      ],
    },
    {
      name: 'commit',
      kills: [t('checkpoint_commit', 'start'), t('checkpoint_commit', 'end', { nth: 2 })],
    },
    {
      name: 'eval-continue',
      kills: [
        r('generateTurn', 'start', { match: '-eval/' }),
        r('generateTurn', 'end', { match: '-eval/', nth: 2 }),
        // Reached as the workflow continues as new, its command sent (sinks run after the activation).
        r('continue_as_new', 'start'),
      ],
    },
  ];
}

/** What CI runs (a two-step run without eval): one run, each component killed in a phase that loses work in flight. */
export function ciSubset(): KillPlan[] {
  return [
    {
      name: 'subset',
      kills: [
        r('generateTurn', 'end', { nth: 2 }),
        t('train_step', 'mid', { after_ms: 400 }),
        r('continue_as_new', 'start', { nth: 1 }),
        t('sync_weights', 'mid', { after_ms: 100, nth: 2, server: true }),
      ],
    },
  ];
}

export interface CertRow {
  mode: Mode;
  plan: string;
  kill: string;
  fired: boolean;
  recovered_s: number | null;
  identical: boolean;
}

export interface Certification {
  reference: CertifiedRun;
  rows: CertRow[];
  /** Per plan: what differs from the reference (empty: identical). */
  diffs: Record<string, string[]>;
}

/** The reference run, then each plan's run, compared with it. */
export async function certify(
  engines: TestEngines,
  mode: Mode,
  plans: KillPlan[],
  opts: { sets?: string[]; record?: boolean } = {},
): Promise<Certification> {
  const sets = opts.sets ?? certifySets(mode);
  // One run at a time: the runs share the engine, and each syncs its own weights onto it.
  const reference = await certifyRun(
    engines,
    sets,
    { name: `${mode}-reference`, kills: [] },
    opts.record ? { recordAs: `${mode}-reference` } : {},
  );
  const rows: CertRow[] = [];
  const diffs: Record<string, string[]> = {};
  for (const plan of plans) {
    const run = await certifyRun(engines, sets, { ...plan, name: `${mode}-${plan.name}` });
    const diff = differences(reference.fingerprint, run.fingerprint);
    diffs[plan.name] = diff;
    for (const o of run.outcomes)
      rows.push({
        mode,
        plan: plan.name,
        kill: o.label,
        fired: o.fired,
        recovered_s: o.recovered_s,
        identical: !diff.length,
      });
  }
  return { reference, rows, diffs };
}

/** The certification table, one kill a line. */
export function certTable(rows: CertRow[]): string {
  const head = 'mode   run              kill point                                  recovered  identical';
  const lines = rows.map(
    (x) =>
      `${x.mode.padEnd(6)} ${x.plan.padEnd(16)} ${x.kill.padEnd(43)} ${(x.fired ? (x.recovered_s === null ? '?' : `${x.recovered_s.toFixed(1)} s`) : 'not reached').padStart(9)}  ${x.identical ? 'yes' : 'NO'}`,
  );
  return [head, ...lines].join('\n');
}
