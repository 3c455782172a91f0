// A run's layout on disk and in the blob store, in one place: the state directory's folders and
// records, a run's directory, and the key of an episode's sample. Every room that reads or writes them
// (supervision, activities, the run client, the UI, tests) takes the paths from here.
import path from 'node:path';

/** A run id: it names the run's directory (`<state>/runs/<id>`) and its workflows, so nothing that
 *  could step out of the runs directory ('..', '/', a leading '.'). */
const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export function checkRunId(runId: string): string {
  if (!RUN_ID.test(runId))
    throw Object.assign(
      new Error(
        `run id ${JSON.stringify(runId)}: use letters, digits, '.', '_' and '-', starting with a letter or digit`,
      ),
      { exitCode: 2 },
    );
  return runId;
}

export const stateLayout = (stateDir: string) => ({
  root: stateDir,
  server: path.join(stateDir, 'server'),
  temporalDb: path.join(stateDir, 'server', 'temporal.sqlite'),
  serverRecord: path.join(stateDir, 'server', 'server.json'),
  serverLog: path.join(stateDir, 'server', 'server.log'),
  engines: path.join(stateDir, 'engines'),
  blobs: path.join(stateDir, 'blobs'),
  runs: path.join(stateDir, 'runs'),
  workers: path.join(stateDir, 'workers'),
  /** Each worker kind's in-flight ledger (rollout/inflight.ts, workers/trainer/worker/inflight.py). */
  inflight: (kind: 'rollout' | 'trainer') => path.join(stateDir, 'workers', 'inflight', kind),
  /** The lock the active trainer holds; standbys wait on it (workers/trainer/worker/standby.py). */
  trainerLock: path.join(stateDir, 'workers', 'trainer.lock'),
  /** The trainer's copy of runs whose blob store is remote (workers/trainer/stores/checkpoints.py). */
  trainerScratch: path.join(stateDir, 'trainer-scratch'),
  /** Weights the engines pulled from a remote blob store (workers/tempo_engine/weights_from_store.py). */
  engineWeights: path.join(stateDir, 'engines', 'weights'),
  /** What `train --detach` started, per run (client/detached-run.ts). */
  detachedRuns: path.join(stateDir, 'workers', 'detached'),
});

/** A run's directory (`<state>/runs/<id>`), its id checked first. */
export function runDir(cfg: { state_dir: string }, runId: string): string {
  return path.join(stateLayout(cfg.state_dir).runs, checkRunId(runId));
}

/** An episode's sample in the blob store (docs/CONTRACTS.md). */
export function sampleKey(episodeId: string): string {
  return `samples/${episodeId}.json`;
}
