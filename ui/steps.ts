// A step's page: its GRPO groups side by side, each sample's reward, advantage, length, turns, first
// answer and status, and how many of the step's episodes were trained, filtered or failed.
import { checkRunId } from '../lib/paths.js';
import { UiError, type UiContext } from './context.js';
import { pendingRows, publicRow, recordedRows, type EpisodeRow, type Outcome, type RowSource } from './episode-rows.js';
import { groupsOf, type Group } from './groups.js';
import { stepRecords } from './records.js';
import { runPlan } from './runs.js';

/** How a run's rows are read: its model's tokenizer and its advantage formula (the plan's, when its
 *  workflow is known; else the config's). */
export async function rowSource(ctx: UiContext, runId: string): Promise<RowSource> {
  const plan = await runPlan(ctx, runId);
  return {
    decoder: ctx.decoder(plan?.model_path ?? null),
    drGrpo: plan?.hyper.dr_grpo ?? ctx.cfg.grpo.dr_grpo,
  };
}

export interface StepView {
  run_id: string;
  step: number;
  /** false: the step is still running (its episodes so far; none trained yet). */
  recorded: boolean;
  weight_version: number | null;
  metrics: Record<string, number>;
  counts: Record<Outcome | 'episodes', number>;
  /** An SFT step trains on records, not episodes: no groups. */
  sft_records: number;
  groups: Array<Group<EpisodeRow>>;
  /** The run's recorded steps, for the step picker. */
  steps: number[];
  /** grpo.dr_grpo: advantages are r − mean (else divided by the group's std). */
  dr_grpo: boolean;
}

export async function stepView(ctx: UiContext, runId: string, step: number): Promise<StepView> {
  checkRunId(runId);
  const { records } = await stepRecords(ctx.cfg, runId);
  const rec = records.find((r) => r.step === step);
  if (!rec && !ctx.client)
    throw new UiError(
      404,
      `run ${JSON.stringify(runId)} has no step ${step} recorded (and no Temporal server answers)`,
    );
  const src = await rowSource(ctx, runId);
  const rows = rec ? await recordedRows(ctx, rec, src) : await pendingRows(ctx, ctx.client!, runId, step, src);
  if (!rec && rows.length === 0)
    throw new UiError(404, `run ${JSON.stringify(runId)} has no step ${step}: no step record and no episodes`);
  const counts = { episodes: rows.length, trained: 0, filtered: 0, failed: 0, pending: 0 };
  for (const r of rows) counts[r.outcome]++;
  return {
    run_id: runId,
    step,
    recorded: rec !== undefined,
    weight_version: rec?.weight_version ?? null,
    metrics: rec?.metrics ?? {},
    counts,
    sft_records: rec ? rec.episodes.length - rows.length : 0,
    groups: groupsOf(rows.map(publicRow)),
    steps: records.map((r) => r.step),
    dr_grpo: src.drGrpo,
  };
}
