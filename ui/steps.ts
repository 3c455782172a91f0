// A step's page: its GRPO groups side by side, each sample's reward, advantage, length, turns, first
// answer and status, and how many of the step's episodes were trained, filtered or failed; and a
// group's page: its prompt and its samples' completions side by side.
import { checkRunId } from '../stores/layout.js';
import { UiError, type UiContext } from './context.js';
import {
  pendingRows,
  publicRow,
  recordedRows,
  storedSample,
  type EpisodeRow,
  type Outcome,
  type RowSource,
} from './episode-rows.js';
import { groupsOf, type Group } from './groups.js';
import { stepRecords } from './records.js';
import { runPlan } from './runs.js';
import { promptMessages, turnTexts, type PromptMessage } from './sample-view.js';

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
  const src = await rowSource(ctx, runId);
  const rows = rec ? await recordedRows(ctx, rec, src) : await pendingRows(ctx, runId, step, src);
  if (!rows)
    throw new UiError(
      404,
      `run ${JSON.stringify(runId)} has no step ${step} recorded (and no Temporal server answers to list its episodes)`,
    );
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

export interface GroupView {
  run_id: string;
  step: number;
  prompt_index: number;
  group_id: string;
  label: string | null;
  /** The prompt as the model saw it, from the group's first stored sample (null: none stored). */
  prompt: PromptMessage[] | null;
  /** The episode whose images the prompt's image parts are (null: none), and how many it has. */
  image_episode: string | null;
  images: number;
  /** Each sample with its completion's text, turn by turn (the model's text, then the feedback). */
  completions: Array<EpisodeRow & { completion: Array<{ text: string; observation: string | null }> }>;
}

/** A GRPO group (run/step/prompt): its prompt, and its samples' completions side by side. */
export async function groupView(ctx: UiContext, runId: string, step: number, prompt: number): Promise<GroupView> {
  const view = await stepView(ctx, runId, step);
  const group = view.groups.find((g) => g.prompt_index === prompt);
  if (!group)
    throw new UiError(
      404,
      `run ${JSON.stringify(runId)} step ${step} has no group of prompt ${prompt} (prompts ${view.groups.map((g) => g.prompt_index).join(', ') || 'none'})`,
    );
  const { decoder } = await rowSource(ctx, runId);
  const samples = await Promise.all(group.rows.map((r) => storedSample(ctx, r.episode_id)));
  const first = samples.findIndex((s) => s !== null);
  return {
    run_id: runId,
    step,
    prompt_index: prompt,
    group_id: group.group_id,
    label: group.label,
    prompt: first < 0 ? null : promptMessages(samples[first]!.prompt_ids, decoder),
    image_episode: first < 0 || !samples[first]!.images.length ? null : group.rows[first]!.episode_id,
    images: first < 0 ? 0 : samples[first]!.images.length,
    completions: group.rows.map((r, i) => ({ ...r, completion: samples[i] ? turnTexts(samples[i]!, decoder) : [] })),
  };
}
