// An episode's page: exactly what `tempo-rl episodes show --json` prints (auditFromHistory over its
// history and sample, the function auditEpisode runs), and beside it the sample's prompt as the model
// saw it, its tokens (each response token's text, the engine's logprob, the trainer's where it wrote
// them, and the loss mask) with each turn's place among them, its outcome in its step, the turns'
// times, the retried generates and what changed, and a link to the history in the Temporal UI.
import {
  EpisodeNotFound,
  auditFromHistory,
  episodeHistory,
  normalizeEpisodeId,
  type EpisodeAudit,
} from '../client/audit.js';
import type { Sample } from '../lib/contract.js';
import { checkRunId } from '../stores/layout.js';
import { episodeWorkflowId, parseEpisodeId } from '../protocol/episode.js';
import { sampleKey } from '../stores/layout.js';
import { historyUrl, UiError, type UiContext } from './context.js';
import { publicRow, recordedRows, storedSample, type EpisodeRow } from './episode-rows.js';
import { stepRecords } from './records.js';
import { rowSource } from './steps.js';
import { turnRetries, type TurnRetry } from './retries.js';
import { promptMessages, turnSpans, type PromptMessage, type TurnSpan } from './sample-view.js';
import { episodeTimings, type EpisodeTimings } from './timings.js';
import { trainerLogprobs } from './trainer-logprobs.js';

export interface EpisodeView {
  episode_id: string;
  /** The audit (`episodes show --json`); null when its history cannot be read (audit_note says why). */
  audit: EpisodeAudit | null;
  audit_note: string | null;
  sample: {
    label: string;
    environment: string | null;
    temperature: number;
    reward: number;
    status: string;
    truncated_reason: string | null;
    prompt_len: number;
    images: number;
    turns: Sample['turns'];
  } | null;
  /** The response's tokens: [id, text, rollout logprob, loss mask, trainer logprob (null: none
   *  written, or not finite)]; turn by turn, where `spans` says. */
  tokens: Array<[number, string, number, 0 | 1, number | null]>;
  /** Each turn's place in `tokens`: its generated tokens, its synthetic end-of-turn token, its observation. */
  spans: TurnSpan[];
  /** The prompt as the model saw it (its images are the episode's images, in order). */
  prompt: PromptMessage[];
  /** The step whose trainer wrote the trainer logprobs (null: none written). */
  trainer_step: number | null;
  /** Each turn whose generate was retried: the failed attempt beside the completed one. */
  retries: TurnRetry[];
  /** Its row in its step: outcome (trained, filtered, failed) and advantage. */
  row: EpisodeRow | null;
  timings: EpisodeTimings | null;
  history_url: string | null;
}

/** An episode id from the request (either form `episodes show` takes), checked to name a run of
 *  this state dir; a bad one is a 400 naming it. */
export function checkedEpisodeId(raw: string): { id: string; runId: string; step: number } {
  const id = normalizeEpisodeId(raw);
  try {
    const parsed = parseEpisodeId(id);
    return { id, runId: checkRunId(parsed.run_id), step: parsed.step };
  } catch (err) {
    throw new UiError(400, `episode id ${JSON.stringify(raw)}: ${(err as Error).message}`);
  }
}

const NO_HISTORY =
  'no Temporal server answers: the turns below are the sample’s (their text decoded from its tokens), without the history’s facts';

async function auditOf(ctx: UiContext, id: string) {
  try {
    // a long episode's history is several pages: more than one look-up, still bounded
    const answer = await ctx.temporal.ask((client) => episodeHistory(client, id), { deadlineMs: 5000 });
    if (!answer) return { audit: null, history: null, note: NO_HISTORY };
    const history = answer.value;
    return { audit: await auditFromHistory(id, history, ctx.store), history, note: null };
  } catch (err) {
    if (err instanceof EpisodeNotFound) return { audit: null, history: null, note: err.message };
    throw err;
  }
}

async function stepRow(ctx: UiContext, runId: string, step: number, id: string): Promise<EpisodeRow | null> {
  const rec = (await stepRecords(ctx.cfg, runId)).records.find((r) => r.step === step);
  if (!rec?.episodes.some((e) => e.episode_id === id)) return null;
  const row = (await recordedRows(ctx, rec, await rowSource(ctx, runId))).find((r) => r.episode_id === id);
  return row ? publicRow(row) : null;
}

export async function episodeView(ctx: UiContext, raw: string): Promise<EpisodeView> {
  const { id, runId, step } = checkedEpisodeId(raw);
  const [sample, { audit, history, note }, trainer] = await Promise.all([
    storedSample(ctx, id),
    auditOf(ctx, id),
    trainerLogprobs(ctx.store, id),
  ]);
  if (!audit && !sample)
    throw new UiError(404, `no episode ${JSON.stringify(id)}: ${note ?? 'no history'}, and no sample ${sampleKey(id)}`);
  const decoder = sample ? (await rowSource(ctx, runId)).decoder : null;
  const trained = trainer && sample && trainer.logprobs.length === sample.response_ids.length ? trainer : null;
  return {
    episode_id: id,
    audit,
    audit_note: note,
    sample: sample && {
      label: sample.label,
      environment: sample.environment ?? null,
      temperature: sample.temperature,
      reward: sample.reward,
      status: sample.status,
      truncated_reason: sample.truncated_reason,
      prompt_len: sample.prompt_ids.length,
      images: sample.images.length,
      turns: sample.turns,
    },
    tokens: sample
      ? sample.response_ids.map((t, i) => [
          t,
          decoder!.piece(t),
          sample.rollout_logprobs[i]!,
          sample.loss_mask[i]!,
          trained?.logprobs[i] ?? null,
        ])
      : [],
    spans: sample ? turnSpans(sample) : [],
    prompt: sample ? promptMessages(sample.prompt_ids, decoder!) : [],
    trainer_step: trained?.step ?? null,
    retries: history ? turnRetries(history) : [],
    row: await stepRow(ctx, runId, step, id),
    timings: history ? episodeTimings(history) : null,
    history_url: historyUrl(ctx, episodeWorkflowId(id)),
  };
}

const IMAGE_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  gif: 'image/gif',
};

/** The episode's image number `index` (only images of that episode's sample are served). */
export async function episodeImage(
  ctx: UiContext,
  raw: string,
  index: number,
): Promise<{ bytes: Buffer; type: string }> {
  const { id } = checkedEpisodeId(raw);
  const sample = await storedSample(ctx, id);
  if (!sample) throw new UiError(404, `episode ${JSON.stringify(id)} has no sample ${sampleKey(id)}`);
  const ref = sample.images[index];
  if (ref === undefined)
    throw new UiError(404, `episode ${JSON.stringify(id)} has ${sample.images.length} image(s): no image ${index}`);
  const type = IMAGE_TYPES[ref.split('.').at(-1)?.toLowerCase() ?? ''];
  if (!type) throw new UiError(404, `image ${ref} of episode ${JSON.stringify(id)}: not an image type the page shows`);
  return { bytes: await ctx.store.getBytes(ref), type };
}
