// The trainingRun workflow (docs/ARCHITECTURE.md "Training run"): per step, a batch from the run's
// step source (GRPO episodes, synchronous or from the async window; or SFT records) → train (Python)
// → weight sync → record metrics → eval every k steps → continue-as-new with the run state.
// Deterministic: every I/O is an activity; prompt order is the pure lib/prompt-order.ts. The run's
// state and its message handlers are one object (workflows/training-run-state.ts).
import { allHandlersFinished, condition, continueAsNew, proxySinks, workflowInfo } from '@temporalio/workflow';
import type { RunResult, RunSinks, RunState } from '../protocol/training-run.js';
import { runEval } from './episode-children.js';
import { rolloutActs as acts, trainerActs, type TrainerActivities } from './run-activities.js';
import { prefixed } from './sft-metrics.js';
import { SftSteps } from './sft-steps.js';
import { RolloutSteps, SyncRollout, WindowRollout, type StepSource } from './step-sources.js';
import { trainAndRecord } from './train-step.js';
import { TrainingRun } from './training-run-state.js';

// The end of a run waits this long, at most, for engines the last sync missed.
const FINAL_SYNC_TRIES = 20;
const FINAL_SYNC_WAIT_MS = 15_000;

function stepSource(run: TrainingRun): StepSource {
  if (run.plan.algorithm === 'sft') return new SftSteps(run);
  return new RolloutSteps(run, run.staleness > 0 ? new WindowRollout(run) : new SyncRollout(run));
}

export async function trainingRun(initial: RunState): Promise<RunResult> {
  const run = new TrainingRun(initial);
  const trainer = trainerActs(run.plan.trainer_task_queue);
  const source = stepSource(run);
  const finish = async (...end: Parameters<TrainingRun['result']>): Promise<RunResult> => {
    await source.close();
    return run.result(...end);
  };
  await prepare(run, trainer);
  const { state, plan, progress } = run;
  while (state.step < plan.steps) {
    if (state.paused) {
      run.setStatus('paused');
      progress.phase = 'idle';
      await condition(() => !state.paused || run.stopRequested);
    }
    if (run.stopRequested) return finish('stopped');
    if (run.status !== 'running') run.setStatus('running');
    const stepStarted = Date.now();
    progress.phase = 'rollout';
    const outcome = await source.next();
    if ('end' in outcome) return finish(outcome.end, outcome.reason);
    if ('redo' in outcome) continue;
    await trainAndRecord(run, trainer, outcome.train, stepStarted, () => source.beforeSync());
    if (run.stopRequested) return finish('stopped');
    await maybeContinueAsNew(run, source);
  }
  const undone = await finalSync(run, trainer);
  return finish('completed', undone);
}

/** The dataset snapshot, the engines on the run's weights, and the start-of-run eval: each once. */
async function prepare(run: TrainingRun, trainer: TrainerActivities): Promise<void> {
  const { state, plan, progress } = run;
  if (!state.dataset) {
    progress.phase = 'dataset';
    state.dataset =
      plan.algorithm === 'sft'
        ? await acts.prepareSftDataset({
            run_id: state.run_id,
            path: plan.sft_path!,
            dataset: plan.dataset,
            environment: plan.eval_episode.environment,
          })
        : await acts.prepareDataset({
            run_id: state.run_id,
            dataset: plan.dataset,
            environment: plan.episode.environment,
            // Asked for only when used: a shuffle run's activity input and result stay as recorded.
            ...(plan.prompt_order === 'stratified' ? { strata: true } : {}),
          });
  }
  if (!state.engines_synced) {
    // The engines may serve other weights (a new run after another, a resumed run, restarted engines).
    progress.phase = 'sync';
    await trainer.sync_weights(
      run.syncInput(state.weight_version, state.checkpoint ?? plan.model_path, await acts.listEngines()),
    );
    state.engines_synced = true;
  }
  if (state.step === 0 && plan.eval_at_start && plan.eval_interval > 0 && state.dataset.eval_ref && !state.start_eval) {
    // The "before" of the run: the starting weights on the held-out split.
    progress.phase = 'eval';
    state.start_eval = prefixed(await runEval(state, plan, state.weight_version, progress), 'eval', 'eval_start');
  }
}

/** Continues as new after run.steps_per_workflow_run steps, or when Temporal suggests it (before the
 *  history gets too large: many episodes per step). */
async function maybeContinueAsNew(run: TrainingRun, source: StepSource): Promise<void> {
  const { state, plan } = run;
  if (
    state.step >= plan.steps ||
    (run.stepsThisRun < plan.steps_per_workflow_run && !workflowInfo().continueAsNewSuggested)
  )
    return;
  await source.suspend();
  await condition(allHandlersFinished);
  proxySinks<RunSinks>().killPoints.reach('continue_as_new');
  await continueAsNew<typeof trainingRun>(state);
}

/** The run's result is "every engine serves the final weights": an engine the last sync missed (dead
 *  then, restarted since) gets them now. Returns what is left undone, if anything. */
async function finalSync(run: TrainingRun, trainer: TrainerActivities): Promise<string | undefined> {
  const { state, plan, progress } = run;
  if (!state.engines_behind?.length) return undefined;
  progress.phase = 'sync';
  for (let i = 0; i < FINAL_SYNC_TRIES && state.engines_behind.length && !run.stopRequested; i++) {
    await condition(() => run.stopRequested, FINAL_SYNC_WAIT_MS);
    const out = await trainer.sync_weights(
      run.syncInput(state.weight_version, state.checkpoint ?? plan.model_path, await acts.listEngines()),
    );
    state.engines_behind = out.engines.filter((e) => !e.ok).map((e) => e.url);
  }
  if (!state.engines_behind.length) return undefined;
  return `the final weights (version ${state.weight_version}) did not reach ${state.engines_behind.join(', ')} (labelled unusable there); the next run's start syncs them`;
}
