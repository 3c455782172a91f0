// One row per episode of a step, from the step record (which episodes the step trained) and each
// episode's sample blob (reward, status, turns, answers, tokens): the step page's groups and the run's
// search both read these rows, never an episode's history. A recorded step's rows never change (its
// record and samples are written once), so they are kept; a step still running is read each time.
import { sampleKey } from '../stores/layout.js';
import { listEpisodes } from '../client/audit.js';
import { Sample } from '../lib/contract.js';
import { groupId, parseEpisodeId } from '../protocol/episode.js';
import type { StepRecord } from '../protocol/activities.js';
import type { UiContext } from './context.js';
import { groupAdvantages } from './groups.js';
import type { TokenDecoder } from './tokens.js';
import { mapLimited } from '../lib/data/load.js';

export type Outcome = 'trained' | 'filtered' | 'failed' | 'pending';

export interface EpisodeRow {
  episode_id: string;
  step: number;
  prompt_index: number;
  sample_index: number;
  group_id: string;
  /** trained; filtered (an all-equal group, grpo.zero_std_filter); failed (no usable sample); pending (its step is not recorded yet). */
  outcome: Outcome;
  reward: number | null;
  /** The GRPO advantage the trainer gave it (trained samples only). */
  advantage: number | null;
  status: string | null;
  truncated_reason: string | null;
  response_len: number | null;
  generated_tokens: number | null;
  turns: number | null;
  /** Each turn's calc_score answer as the environment parsed it (null: no call, or a malformed one). */
  answers: Array<string | null>;
  label: string | null;
}

/** A row with the model's text (every generated token, decoded), for the text search. */
export interface IndexedRow extends EpisodeRow {
  text: string;
}

export interface RowSource {
  /** Decodes the run's tokens. */
  decoder: TokenDecoder;
  /** grpo.dr_grpo of the run: advantages are r − mean, not divided by the group's std. */
  drGrpo: boolean;
}

const LOAD_CONCURRENCY = 16;
const KEPT_STEPS = 2000;
const kept = new Map<string, Promise<IndexedRow[]>>();

/** An episode's sample blob (samples/<id>.json), or null when it has none. */
export async function storedSample(ctx: UiContext, episodeId: string): Promise<Sample | null> {
  const ref = ctx.store.namedRef(sampleKey(episodeId));
  if (!(await ctx.store.exists(ref))) return null;
  return Sample.parse(await ctx.store.getJson(ref));
}

/** The model's text of a sample: its generated tokens (loss mask 1), decoded. */
export function generatedText(sample: Sample, decoder: TokenDecoder): string {
  return decoder.text(sample.response_ids.filter((_, i) => sample.loss_mask[i] === 1));
}

function rowOf(
  episodeId: string,
  trained: boolean | null,
  sample: Sample | null,
  decoder: TokenDecoder,
): IndexedRow | null {
  let id: ReturnType<typeof parseEpisodeId>;
  try {
    id = parseEpisodeId(episodeId);
  } catch {
    return null; // an SFT step's records (sft/<run>/<step>/<i>) are not episodes
  }
  const usable = sample !== null && sample.status !== 'FAILED' && sample.status !== 'ABORTED';
  return {
    episode_id: episodeId,
    step: id.step,
    prompt_index: id.prompt_index,
    sample_index: id.sample_index,
    group_id: groupId(id),
    outcome: trained === null ? 'pending' : trained ? 'trained' : usable ? 'filtered' : 'failed',
    reward: sample?.reward ?? null,
    advantage: null,
    status: sample?.status ?? null,
    truncated_reason: sample?.truncated_reason ?? null,
    response_len: sample?.response_ids.length ?? null,
    generated_tokens: sample ? sample.turns.reduce((a, t) => a + t.generated_tokens, 0) : null,
    turns: sample?.turns.length ?? null,
    answers: sample?.turns.map((t) => t.tool_answer ?? null) ?? [],
    label: sample?.label ?? null,
    text: sample ? generatedText(sample, decoder) : '',
  };
}

/** Fills in the advantages of the trained rows, group by group, as the trainer computes them. */
function withAdvantages(rows: IndexedRow[], drGrpo: boolean): IndexedRow[] {
  const groups = new Map<string, IndexedRow[]>();
  for (const r of rows)
    if (r.outcome === 'trained' && r.reward !== null) groups.set(r.group_id, [...(groups.get(r.group_id) ?? []), r]);
  for (const g of groups.values()) {
    const adv = groupAdvantages(
      g.map((r) => r.reward!),
      drGrpo,
    );
    g.forEach((r, i) => {
      r.advantage = adv[i]!;
    });
  }
  return rows;
}

async function buildRows(
  ctx: UiContext,
  episodes: Array<{ episode_id: string; trained: boolean | null }>,
  src: RowSource,
): Promise<IndexedRow[]> {
  const rows = await mapLimited(episodes, LOAD_CONCURRENCY, async (e) =>
    rowOf(e.episode_id, e.trained, await storedSample(ctx, e.episode_id), src.decoder),
  );
  return withAdvantages(
    rows.filter((r): r is IndexedRow => r !== null),
    src.drGrpo,
  );
}

/** The rows of a recorded step (kept after the first read). */
export function recordedRows(ctx: UiContext, rec: StepRecord, src: RowSource): Promise<IndexedRow[]> {
  const key = `${ctx.cfg.state_dir}\0${rec.run_id}\0${rec.step}`;
  let rows = kept.get(key);
  if (!rows) {
    rows = buildRows(ctx, rec.episodes, src);
    rows.catch(() => kept.delete(key));
    kept.set(key, rows);
    if (kept.size > KEPT_STEPS) kept.delete(kept.keys().next().value!);
  }
  return rows;
}

/** The rows of a step not recorded yet: its episodes as the Temporal server lists them (null: the
 *  server did not answer in time). */
export async function pendingRows(
  ctx: UiContext,
  runId: string,
  step: number,
  src: RowSource,
): Promise<IndexedRow[] | null> {
  // a step's episodes and their results: more calls than one look-up, still bounded
  const answer = await ctx.temporal.ask((client) => listEpisodes(client, runId, step), { deadlineMs: 5000 });
  if (!answer) return null;
  const listed = answer.value;
  return buildRows(
    ctx,
    listed.map((e) => ({ episode_id: e.episode_id, trained: null })),
    src,
  );
}

/** A row without its text (what the pages are sent). */
export function publicRow({ text: _, ...row }: IndexedRow): EpisodeRow {
  return row;
}
