// Steps of an SFT run (algorithm: sft): the transcripts snapshot, and one step's records turned into
// samples with exactly the token layout of a rollout — the prompt through the render step, each
// assistant turn's tokens (mask 1), the synthetic end-of-turn after a tool call and each observation
// through the observation render (mask 0), stitched by lib/trajectory.ts like an episode.
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import type { DatasetConfig } from '../config/schema.js';
import { LocalBlobStore, type BlobStore } from '../stores/blobstore.js';

import { mapLimited } from '../lib/data/load.js';
import { readJsonl } from '../lib/data/readers.js';
import { ImageError, ImageIntake } from '../lib/images.js';
import { childLogger } from '../base/log.js';
import {
  appendGenerated,
  appendObservation,
  checkInvariants,
  forbiddenResponseTokens,
  startTrajectory,
  type Trajectory,
} from '../lib/trajectory.js';
import { ToolSpecSchema } from '../engine/schemas.js';
import type { ToolSpec } from '../engine/types.js';
import type { EpisodeMessage } from '../protocol/episode.js';
import { Sample } from '../lib/contract.js';
import type { SftBatchInput, SftBatchResult, SftDatasetInfo } from '../protocol/activities.js';
import { loadStoredPrompt, observationRenderer, renderActivities, type RenderDeps } from './render.js';
import { refuseForeignBlobStore } from './blob-root.js';
import { snapshotEval } from './run.js';

// Records of one SFT step rendered at a time (engine render requests in flight).
const RENDER_CONCURRENCY = 8;

const log = childLogger('sft');

const Role = z.enum(['system', 'user', 'assistant', 'tool']);
export const SftRecordSchema = z.strictObject({
  id: z.union([z.string().min(1), z.number()]).transform(String),
  messages: z.array(z.strictObject({ role: Role, content: z.string() })).min(2),
  images: z.array(z.string().min(1)).default([]),
  tools: z.array(ToolSpecSchema).default([]),
});

/** A record ready to render: image parts carry blob refs. */
export interface SftRow {
  id: string;
  messages: EpisodeMessage[];
  tools: ToolSpec[];
}

const IMAGE = '<image>';

/** A record that cannot become a sample (the step skips it, with the reason); anything else is retried. */
class SftRecordError extends Error {}

function withImages(content: string, refs: string[]): EpisodeMessage['content'] {
  if (!content.includes(IMAGE)) return content;
  const parts: Exclude<EpisodeMessage['content'], string> = [];
  content.split(IMAGE).forEach((text, i) => {
    if (i > 0) parts.push({ type: 'image_url', image_url: { url: refs.shift()! } });
    if (text) parts.push({ type: 'text', text });
  });
  return parts;
}

export function sftActivities(deps: RenderDeps & { store: BlobStore }) {
  const render = renderActivities(deps);
  const renderObservation = observationRenderer(deps);
  // Transcripts repeat a few feedback texts: their tokens (three renders each) are worked out once per worker.
  const observations = new Map<string, Promise<{ token_ids: number[] }>>();
  const observation = (episode_id: string, text: string, tools: ToolSpec[]) => {
    const key = JSON.stringify([text, tools]);
    let hit = observations.get(key);
    if (!hit) {
      hit = renderObservation({ episode_id, observation: text, tools });
      observations.set(key, hit);
      hit.catch(() => observations.delete(key));
    }
    return hit;
  };

  async function toSample(row: SftRow, input: SftBatchInput, index: number): Promise<Sample> {
    const sampleId = `sft/${input.run_id}/${input.step}/${index}`;
    const first = row.messages.findIndex((m) => m.role === 'assistant');
    if (first < 1) throw new SftRecordError('no assistant turn after the prompt');
    const prompt = await render.renderPrompt({
      episode_id: sampleId,
      messages: row.messages.slice(0, first),
      tools: row.tools,
    });
    const t: Trajectory = startTrajectory(prompt.prompt_len, input.limits);
    const engines = deps.engines();
    if (!engines.tokenize)
      throw ApplicationFailure.nonRetryable('the engines cannot tokenize text', 'EngineRequestRejected');
    const turns: Sample['turns'] = [];
    const rest = row.messages.slice(first);
    for (let i = 0; i < rest.length; i++) {
      const m = rest[i]!;
      // An episode alternates: assistant turn, observation, assistant turn…
      if ((m.role === 'assistant') !== (i % 2 === 0))
        throw new SftRecordError(
          `message ${first + i + 1}: expected ${i % 2 === 0 ? 'an assistant turn' : 'an observation'}, given role ${m.role}`,
        );
      if (typeof m.content !== 'string')
        throw new SftRecordError(`message ${first + i + 1}: an image after the prompt`);
      const text = m.content;
      if (m.role === 'assistant') {
        const ids = await engines.tokenize(text);
        const toolCall = text.includes('<tool_call>');
        // Only a tool call is followed by an observation (the environment ends an episode on a turn
        // without one). That turn stopped at its tool call: the stitcher adds the synthetic EOS. The
        // last turn without a tool call ends as the model must end it: its own end-of-turn (mask 1).
        if (!toolCall && i < rest.length - 1)
          throw new SftRecordError(`turn ${turns.length + 1} has no tool call but an observation follows`);
        const token_ids = toolCall ? ids : [...ids, prompt.conventions.end_of_turn_id];
        const stop = appendGenerated(
          t,
          { token_ids, logprobs: token_ids.map(() => 0), finish_reason: 'stop' },
          prompt.conventions,
        );
        if (stop) throw new SftRecordError(`turn ${turns.length + 1}: ${stop.reason}`);
        turns.push({
          engine: prompt.engine,
          weight_version: null,
          generated_tokens: token_ids.length,
          observation_tokens: 0,
          finish_reason: 'stop',
        });
      } else {
        const obs = await observation(sampleId, text, row.tools);
        const stop = appendObservation(t, obs.token_ids, prompt.conventions);
        if (stop) throw new SftRecordError(`observation after turn ${turns.length}: ${stop.reason}`);
        turns[turns.length - 1]!.observation_tokens = t.spans[t.spans.length - 1]!.obs_len;
      }
    }
    const stored = await loadStoredPrompt(deps.store, prompt.prompt_ref);
    const sample: Sample = {
      schema_version: 1,
      episode_id: sampleId,
      run_id: input.run_id,
      step: input.step,
      prompt_index: index,
      sample_index: 0,
      group_id: row.id,
      prompt_ids: stored.prompt_ids,
      response_ids: t.response_ids,
      loss_mask: t.loss_mask as Array<0 | 1>,
      rollout_logprobs: t.logprobs,
      images: prompt.image_refs,
      reward: 0,
      status: 'COMPLETED',
      truncated_reason: null,
      temperature: 1,
      label: row.id,
      turns,
      routed_experts: null,
    };
    const inv = checkInvariants(sample, t.budget);
    if (!inv.ok) throw new SftRecordError(inv.problems.join('; '));
    const leaked = forbiddenResponseTokens(t, prompt.conventions);
    if (leaked) throw new SftRecordError(leaked.reason);
    return sample;
  }

  return {
    /** Snapshots the transcripts of sft.path (images into the blob store) and the eval split of `dataset`. */
    async prepareSftDataset(input: {
      run_id: string;
      path: string;
      dataset: DatasetConfig;
      environment?: string;
    }): Promise<SftDatasetInfo> {
      const file = path.resolve(input.path);
      const intake = new ImageIntake({
        store: deps.store, // Paths into a local store are allowed: sft-export writes them.
        roots: [
          path.dirname(file),
          ...(deps.store instanceof LocalBlobStore ? [deps.store.root] : []),
          ...input.dataset.image_roots,
        ],
        baseDir: path.dirname(file),
        maxPixels: input.dataset.max_image_pixels,
        maxBytes: input.dataset.max_image_bytes,
      });
      const rows: SftRow[] = [];
      const skipped: Array<{ row: number; reason: string }> = [];
      const ids = new Map<string, number>();
      for (const rec of await readJsonl(file)) {
        const parsed = SftRecordSchema.safeParse(rec.value);
        if (rec.error || !parsed.success) {
          skipped.push({
            row: rec.row,
            reason: rec.error ?? parsed.error!.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
          });
          continue;
        }
        const r = parsed.data;
        const placeholders = r.messages.reduce((n, m) => n + m.content.split(IMAGE).length - 1, 0);
        if (placeholders !== r.images.length) {
          skipped.push({ row: rec.row, reason: `${placeholders} ${IMAGE} placeholders but ${r.images.length} images` });
          continue;
        }
        if (ids.has(r.id)) {
          skipped.push({
            row: rec.row,
            reason: `duplicate id ${JSON.stringify(r.id)} (first at row ${ids.get(r.id)})`,
          });
          continue;
        }
        let refs: string[];
        try {
          refs = await Promise.all(r.images.map((img) => intake.ingest(img, rec.row)));
        } catch (err) {
          if (!(err instanceof ImageError)) throw err;
          skipped.push({ row: rec.row, reason: err.message });
          continue;
        }
        ids.set(r.id, rec.row);
        rows.push({
          id: r.id,
          tools: r.tools,
          messages: r.messages.map((m) => ({ role: m.role, content: withImages(m.content, refs) })),
        });
      }
      if (rows.length === 0)
        throw ApplicationFailure.nonRetryable(
          `sft.path ${file}: no usable records (${skipped.length} skipped${skipped[0] ? `; first: row ${skipped[0].row}: ${skipped[0].reason}` : ''})`,
          'DatasetError',
        );
      for (const s of skipped) log.warn({ file, row: s.row, reason: s.reason }, 'SFT record skipped');
      const train_ref = await deps.store.putJson(`runs/${input.run_id}/sft-train.json`, rows);
      // The run state keeps the count and the first few reasons (the log has them all).
      return {
        train_ref,
        train_size: rows.length,
        ...(await snapshotEval(deps.store, input.run_id, input.dataset, input.environment)),
        skipped: skipped.slice(0, 5),
        skipped_count: skipped.length,
      };
    },

    /** One step's records → samples (blob:named/samples/sft/<run>/<step>/<i>.json); a record that does not fit is skipped with its reason. */
    async renderSftBatch(input: SftBatchInput): Promise<SftBatchResult> {
      refuseForeignBlobStore(deps.store, input, `renderSftBatch of run ${input.run_id} step ${input.step}`);
      const rows = await deps.store.getJson<SftRow[]>(input.dataset_ref);
      // Records render independently (each its own engine requests and sample blob): several at a time.
      const rendered = await mapLimited([...input.indices.entries()], RENDER_CONCURRENCY, async ([k, index]) => {
        const row = rows[index];
        if (!row)
          throw ApplicationFailure.nonRetryable(
            `SFT dataset ${input.dataset_ref} has no record ${index}`,
            'DatasetError',
          );
        try {
          const sample = await toSample(row, input, k);
          const sample_ref = await deps.store.putJson(`samples/${sample.episode_id}.json`, Sample.parse(sample));
          return {
            sample: {
              id: sample.episode_id,
              record_id: row.id,
              sample_ref,
              response_len: sample.response_ids.length,
              mask_sum: sample.loss_mask.reduce<number>((a, b) => a + b, 0),
            },
          };
        } catch (err) {
          const recordProblem =
            err instanceof SftRecordError ||
            (err instanceof ApplicationFailure && err.type === 'ObservationSpecialTokens');
          if (!recordProblem) throw err;
          return { skipped: { id: row.id, reason: (err as Error).message } };
        }
      });
      const out: SftBatchResult = {
        samples: rendered.flatMap((r) => (r.sample ? [r.sample] : [])),
        skipped: rendered.flatMap((r) => (r.skipped ? [r.skipped] : [])),
      };
      // A step that trains on nothing because every record is unusable is a data error, not a no-op.
      if (out.samples.length === 0)
        throw ApplicationFailure.nonRetryable(
          `step ${input.step}: none of its ${out.skipped.length} SFT records is usable; first: ${out.skipped[0]?.id}: ${out.skipped[0]?.reason}`,
          'DatasetError',
        );
      return out;
    },
  };
}
