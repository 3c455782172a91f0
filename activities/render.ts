import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import sharp from 'sharp';
import { z } from 'zod';
import type { BlobStore } from '../stores/blobstore.js';
import type { ChatMessage, ContentPart, ToolSpec } from '../lib/data/prompt.js';
import { ImageIntake } from '../lib/images.js';
import { resolveImageUrls } from '../lib/data/prompt-images.js';
import { appendObservation, checkObservationSpecials, observationSuffix, TrajectoryError } from '../lib/trajectory.js';
import { neutraliseSpecialTokens } from '../engine/template.js';
import type {
  RenderObservationInput,
  RenderObservationResult,
  RenderPromptInput,
  RenderPromptResult,
} from '../protocol/activities.js';
import type { EpisodeMessage } from '../protocol/episode.js';
import type { EngineConventions, EpisodeEngines } from './episode-engines.js';
import { loadTrajectory, saveTrajectory } from './trajectory-store.js';
import { MODEL_JSON_FILE, readBoundedText } from '../base/bounded-file.js';

export interface ImageProcessorSpec {
  patch_size: number;
  merge_size: number;
  min_pixels: number;
  max_pixels: number;
}

export interface RenderDeps {
  store: BlobStore;
  engines: () => EpisodeEngines;
  imageProcessor: ImageProcessorSpec | null;
}

export const StoredPrompt = z.object({
  prompt_ids: z.array(z.number().int().nonnegative()),
  features: z.unknown().nullable(),
});
export type StoredPrompt = z.infer<typeof StoredPrompt>;

const PreprocessorConfig = z.object({
  patch_size: z.number().int().positive(),
  merge_size: z.number().int().positive(),
  min_pixels: z.number().int().positive().optional(),
  max_pixels: z.number().int().positive().optional(),
  size: z
    .object({ shortest_edge: z.number().int().positive(), longest_edge: z.number().int().positive() })
    .partial()
    .optional(),
});

/** The Qwen-VL image processor settings of a model directory, or null when it has none. */
export function loadImageProcessorSpec(modelDir: string): ImageProcessorSpec | null {
  try {
    const raw = PreprocessorConfig.parse(
      JSON.parse(readBoundedText(path.join(modelDir, 'preprocessor_config.json'), MODEL_JSON_FILE)),
    );
    const min = raw.min_pixels ?? raw.size?.shortest_edge;
    const max = raw.max_pixels ?? raw.size?.longest_edge;
    if (!min || !max) return null;
    return { patch_size: raw.patch_size, merge_size: raw.merge_size, min_pixels: min, max_pixels: max };
  } catch {
    return null;
  }
}

function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** Tokens one image needs through a Qwen-VL processor (smart_resize, then patches / merge²). */
export function imageTokenCount(width: number, height: number, p: ImageProcessorSpec): number {
  const factor = p.patch_size * p.merge_size;
  let h = Math.max(factor, roundHalfEven(height / factor) * factor);
  let w = Math.max(factor, roundHalfEven(width / factor) * factor);
  if (h * w > p.max_pixels) {
    const beta = Math.sqrt((height * width) / p.max_pixels);
    h = Math.max(factor, Math.floor(height / beta / factor) * factor);
    w = Math.max(factor, Math.floor(width / beta / factor) * factor);
  } else if (h * w < p.min_pixels) {
    const beta = Math.sqrt(p.min_pixels / (height * width));
    h = Math.ceil((height * beta) / factor) * factor;
    w = Math.ceil((width * beta) / factor) * factor;
  }
  return ((h / p.patch_size) * (w / p.patch_size)) / (p.merge_size * p.merge_size);
}

export function imageRefsOf(messages: EpisodeMessage[]): string[] {
  const refs: string[] = [];
  for (const m of messages)
    if (Array.isArray(m.content))
      for (const part of m.content)
        if (part.type === 'image_url' && part.image_url.url.startsWith('blob:')) refs.push(part.image_url.url);
  return refs;
}

// A fixed conversation whose assistant turn ends where the episode's generated turn ends; the
// observation's tokens are what the template adds after it.
const PREFIX_CONVERSATION: ChatMessage[] = [
  { role: 'user', content: 'x' },
  { role: 'assistant', content: 'y' },
];
/** An observation with no special tokens: its suffix shows the template's own structure. */
const SKELETON_OBSERVATION = 'x';

function specialIdsOf(conv: EngineConventions): number[] {
  return (
    conv.special_ids ?? [
      ...conv.eos_ids,
      conv.end_of_turn_id,
      ...(conv.image_pad_id === null ? [] : [conv.image_pad_id]),
    ]
  );
}

export function renderActivities(deps: RenderDeps) {
  const observationTokens = observationRenderer(deps);
  async function expectedImageTokens(refs: string[]): Promise<number | null> {
    if (!deps.imageProcessor) return null;
    let total = 0;
    for (const ref of refs) {
      const meta = await sharp(await deps.store.getBytes(ref)).metadata();
      total += imageTokenCount(meta.width ?? 0, meta.height ?? 0, deps.imageProcessor);
    }
    return total;
  }

  return {
    async renderPrompt(input: RenderPromptInput): Promise<RenderPromptResult> {
      const engines = deps.engines();
      input = { ...input, messages: await storeDataUrlImages(input.episode_id, input.messages, deps.store) };
      const messages = await resolveImageUrls(input.messages, deps.store);
      const rendered = await engines.render(
        { messages, tools: input.tools, add_generation_prompt: true },
        { session_id: input.episode_id },
      );
      const conv = await engines.tokenConventions();
      const image_refs = imageRefsOf(input.messages);
      if (image_refs.length > 0 && conv.image_pad_id === null)
        throw ApplicationFailure.nonRetryable(
          `the engine tokenizer has no single <|image_pad|> token, but the prompt of ${input.episode_id} has ${image_refs.length} image(s): the placeholder check cannot run`,
          'ImagePlaceholderMismatch',
        );
      const in_prompt =
        conv.image_pad_id === null ? 0 : rendered.token_ids.filter((id) => id === conv.image_pad_id).length;
      const expected = await expectedImageTokens(image_refs);
      const engine_reported = rendered.image_placeholder_lengths
        ? rendered.image_placeholder_lengths.reduce((a, b) => a + b, 0)
        : null;
      const mismatch =
        (expected !== null && expected !== in_prompt) || (engine_reported !== null && engine_reported !== in_prompt);
      if (mismatch)
        throw ApplicationFailure.nonRetryable(
          `image placeholder tokens: ${in_prompt} in the prompt, ${expected ?? '?'} needed by the images, ${engine_reported ?? '?'} reported by the engine`,
          'ImagePlaceholderMismatch',
        );
      const stored: StoredPrompt = { prompt_ids: rendered.token_ids, features: rendered.features ?? null };
      const prompt_ref = await deps.store.putBytes(Buffer.from(JSON.stringify(stored)), 'json');
      return {
        engine: rendered.engine,
        prompt_ref,
        prompt_len: rendered.token_ids.length,
        image_refs,
        conventions: {
          eos_ids: conv.eos_ids,
          end_of_turn_id: conv.end_of_turn_id,
          forbidden_response_ids:
            conv.forbidden_response_ids ?? (conv.image_pad_id === null ? [] : [conv.image_pad_id]),
        },
        image_tokens: { in_prompt, expected, engine_reported },
      };
    },

    /** The observation's tokens stitched onto the episode's trajectory. */
    async renderObservation(input: RenderObservationInput): Promise<RenderObservationResult> {
      const obs = await observationTokens(input);
      const stitched = await loadTrajectory(deps.store, input.trajectory_ref);
      const before = stitched.trajectory.response_ids.length;
      let stop;
      try {
        stop = appendObservation(stitched.trajectory, obs.token_ids, input.conventions);
      } catch (err) {
        if (err instanceof TrajectoryError)
          throw ApplicationFailure.nonRetryable(`${input.episode_id}: ${err.message}`, 'InvalidSampleRecipe');
        throw err;
      }
      return {
        ...(await saveTrajectory(deps.store, stitched, stop, input.conventions)),
        engine: obs.engine,
        observation_tokens: stitched.trajectory.response_ids.length - before,
      };
    },
  };
}

/** An observation → its token suffix after an assistant turn, from the engine's own chat template. */
export function observationRenderer(deps: { engines: () => EpisodeEngines }) {
  return async (input: {
    episode_id: string;
    observation: string;
    messages?: EpisodeMessage[];
    tools: ToolSpec[];
  }): Promise<{ engine: string; token_ids: number[] }> => {
    const engines = deps.engines();
    const opts = { session_id: input.episode_id };
    const answered = observationMessages(input);
    const withObservation = (text: (content: string) => string) =>
      engines.render(
        {
          messages: [...PREFIX_CONVERSATION, ...answered.map((m) => ({ ...m, content: text(m.content) }))],
          tools: input.tools,
          add_generation_prompt: true,
        },
        opts,
      );
    // The three renders at once: a turn waits for one engine round trip, not three.
    const [conv, prefix, extended, skeleton] = await Promise.all([
      engines.tokenConventions(),
      engines.render({ messages: PREFIX_CONVERSATION, tools: input.tools, add_generation_prompt: false }, opts),
      // The observation may echo the model's answer: its text must never turn into special tokens.
      withObservation(neutraliseSpecialTokens),
      withObservation(() => SKELETON_OBSERVATION),
    ]);
    let token_ids: number[];
    try {
      token_ids = observationSuffix(prefix.token_ids, extended.token_ids, conv.end_of_turn_id);
    } catch (err) {
      if (err instanceof TrajectoryError) throw ApplicationFailure.nonRetryable(err.message, 'TemplateNotPrefixStable');
      throw err;
    }
    try {
      checkObservationSpecials(
        token_ids,
        observationSuffix(prefix.token_ids, skeleton.token_ids, conv.end_of_turn_id),
        specialIdsOf(conv),
      );
    } catch (err) {
      if (err instanceof TrajectoryError)
        throw ApplicationFailure.nonRetryable(`${input.episode_id}: ${err.message}`, 'ObservationSpecialTokens');
      throw err;
    }
    return { engine: extended.engine, token_ids };
  };
}

/** A Python environment's prompt carries its images as data: URLs: each is stored (a normalised PNG,
 *  as a dataset's images are) and the message points at its blob, so the sample keeps its images. */
async function storeDataUrlImages(
  episodeId: string,
  messages: EpisodeMessage[],
  store: BlobStore,
): Promise<EpisodeMessage[]> {
  if (
    !messages.some(
      (m) =>
        Array.isArray(m.content) &&
        m.content.some((p) => p.type === 'image_url' && p.image_url.url.startsWith('data:')),
    )
  )
    return messages;
  const intake = new ImageIntake({ store, roots: [] });
  const stored = async (part: ContentPart): Promise<ContentPart> => {
    if (part.type !== 'image_url' || !part.image_url.url.startsWith('data:')) return part;
    try {
      return { type: 'image_url', image_url: { url: await intake.ingest(part.image_url.url) } };
    } catch (err) {
      throw ApplicationFailure.nonRetryable(
        `${episodeId}: an image of the prompt: ${(err as Error).message}`,
        'InvalidImage',
      );
    }
  };
  return Promise.all(
    messages.map(async (m) =>
      Array.isArray(m.content) ? { ...m, content: await Promise.all(m.content.map(stored)) } : m,
    ),
  );
}

/** What the environment answered, as text messages: its messages, or one user message. An image
 *  after the prompt is refused: a sample's images are its prompt's (the trainer's layout). */
function observationMessages(input: { episode_id: string; observation: string; messages?: EpisodeMessage[] }) {
  if (!input.messages) return [{ role: 'user' as const, content: input.observation }];
  return input.messages.map((m, i) => {
    if (typeof m.content === 'string') return { ...m, content: m.content };
    if (m.content === null || m.content === undefined) return { ...m, content: '' };
    if (m.content.some((part) => part.type !== 'text'))
      throw ApplicationFailure.nonRetryable(
        `${input.episode_id}: message ${i} the environment answered with has an image; images are taken from the first prompt only (a sample's images are its prompt's)`,
        'ObservationImage',
      );
    return { ...m, content: m.content.map((part) => (part.type === 'text' ? part.text : '')).join('') };
  });
}

/** Reads a stored prompt (ids + features) back. */
export async function loadStoredPrompt(store: BlobStore, ref: string): Promise<StoredPrompt> {
  return StoredPrompt.parse(await store.getJson(ref));
}
