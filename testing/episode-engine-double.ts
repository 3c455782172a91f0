// A scripted engine double for episode tests: a tiny Qwen-like chat template over a character
// tokenizer, and generations scripted per call (text, EOS or not, abort, failures, hangs).
// Like a real tokenizer, rendering text reads special-token strings as special tokens; what the
// model "writes" (scripted text) is ordinary character pieces unless `ids` add real specials.
import type { Client } from '@temporalio/client';
import sharp from 'sharp';
import type {
  EngineConventions,
  EngineGenerated,
  EngineGenerateRequest,
  EpisodeEngines,
  RenderChatRequest,
  RenderedChat,
} from '../activities/episode-engines.js';
import { RolloutConfig } from '../config/schema.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import { Sample } from '../lib/contract.js';
import { buildMessages } from '../lib/data/prompt.js';
import { stateLayout } from '../stores/layout.js';
import { connectClient } from '../supervise/temporal.js';
import { episode } from '../workflows/episode.js';
import { episodeSettings, episodeWorkflowId, type EpisodeInput, type EpisodeSummary } from '../protocol/episode.js';
import { startRolloutWorker, startTestServer, type RunningWorker, type TestServer } from './temporal.js';

export const IM_START = 1;
export const IM_END = 2;
export const ENDOFTEXT = 3;
export const IMAGE_PAD = 4;
export const VISION_START = 5;
const SPECIAL: Record<number, string> = {
  [IM_START]: '<|im_start|>',
  [IM_END]: '<|im_end|>',
  [ENDOFTEXT]: '<|endoftext|>',
  [IMAGE_PAD]: '<|image_pad|>',
  [VISION_START]: '<|vision_start|>',
};
const OFFSET = 1000;

export const encode = (text: string): number[] => [...text].map((c) => c.codePointAt(0)! + OFFSET);
const SPECIAL_BY_TEXT = new Map(Object.entries(SPECIAL).map(([id, t]) => [t, Number(id)]));
/** Text → ids as a chat template render does it: special-token strings become special tokens. */
export const tokenizeText = (text: string): number[] =>
  text
    .split(/(<\|[a-z_]+\|>)/)
    .flatMap((part) => (SPECIAL_BY_TEXT.has(part) ? [SPECIAL_BY_TEXT.get(part)!] : encode(part)));
export const decode = (ids: number[]): string =>
  ids.map((id) => SPECIAL[id] ?? String.fromCodePoint(id - OFFSET)).join('');

/** A turn that checks `answer` with the calc_score tool, and text after the stop string that the engine cuts. */
export const toolCall = (answer: string) =>
  `I think it is ${answer}. <tool_call>{"name":"calc_score","arguments":{"answer":${JSON.stringify(answer)}}}</tool_call> trailing text the stop string cuts`;

export interface ScriptedTurn {
  text: string;
  /** End with <|im_end|> when the text has no stop string (default true). */
  eos?: boolean;
  finish?: 'abort';
  /** Override the logprobs (e.g. a wrong count). */
  logprobs?: number[];
  /** Throw this error instead of answering (the attempt fails). */
  fail?: Error & { engine?: string };
  /** Never answer; the request ends only when its signal aborts (a hung engine). */
  hang?: boolean;
  /** Token ids the model samples after the text (e.g. a special token). */
  ids?: number[];
  /** The weight version the engine stamps (default: none reported). */
  weight_version?: number | 'unknown' | null;
}

export class EngineDouble implements EpisodeEngines {
  readonly requests: EngineGenerateRequest[] = [];
  readonly outputs: EngineGenerated[] = [];
  /** Requests whose signal aborted (cancelled by the activity). */
  readonly aborted: EngineGenerateRequest[] = [];
  renders = 0;
  constructor(
    readonly script: (req: EngineGenerateRequest, call: number) => ScriptedTurn,
    readonly imageTokensPerImage = 4,
    readonly engines = ['http://double-a', 'http://double-b'],
  ) {}

  async render(req: RenderChatRequest): Promise<RenderedChat> {
    this.renders++;
    const ids: number[] = [];
    const messages = req.messages as Array<{ role: string; content: string | Array<{ type: string; text?: string }> }>;
    if (req.tools.length > 0)
      ids.push(IM_START, ...encode(`system\n# Tools ${JSON.stringify(req.tools).length}`), IM_END, ...encode('\n'));
    let images = 0;
    for (const m of messages) {
      ids.push(IM_START, ...encode(`${m.role}\n`));
      if (typeof m.content === 'string') ids.push(...tokenizeText(m.content));
      else
        for (const part of m.content) {
          if (part.type === 'image_url') {
            images++;
            ids.push(...Array(this.imageTokensPerImage).fill(IMAGE_PAD));
          } else ids.push(...tokenizeText(part.text ?? ''));
        }
      ids.push(IM_END, ...encode('\n'));
    }
    if (req.add_generation_prompt) ids.push(IM_START, ...encode('assistant\n'));
    return {
      engine: this.engines[0]!,
      token_ids: ids,
      features: images ? { fake_features: images } : null,
      image_placeholder_lengths: images ? Array(images).fill(this.imageTokensPerImage) : null,
    };
  }

  async generate(req: EngineGenerateRequest): Promise<EngineGenerated> {
    const call = this.requests.length;
    const { on_engine, signal, ...plain } = req;
    this.requests.push(structuredClone(plain));
    const turn = this.script(req, call);
    const engine = this.engines.find((e) => !req.exclude_engines.includes(e)) ?? this.engines[0]!;
    on_engine?.(engine);
    if (turn.fail) throw Object.assign(turn.fail, { engine: turn.fail.engine ?? engine });
    if (turn.hang)
      return new Promise<never>((_resolve, reject) => {
        const abort = () => {
          this.aborted.push(plain);
          reject(Object.assign(new Error(`engine ${engine}: request cancelled`), { engine }));
        };
        if (signal?.aborted) abort();
        else signal?.addEventListener('abort', abort, { once: true });
      });
    let text = turn.text;
    let eos = turn.eos ?? true;
    for (const s of req.sampling.stop) {
      const at = text.indexOf(s);
      if (at >= 0) {
        text = text.slice(0, at + s.length);
        eos = false;
      }
    }
    let ids = [...encode(text), ...(turn.ids ?? []), ...(eos ? [IM_END] : [])];
    let finish = turn.finish ?? 'stop';
    if (ids.length > req.sampling.max_tokens) {
      ids = ids.slice(0, req.sampling.max_tokens);
      finish = 'length';
    }
    const out: EngineGenerated = {
      engine,
      token_ids: ids,
      logprobs: turn.logprobs ?? ids.map((_, i) => -0.01 * ((i % 7) + 1)),
      finish_reason: finish,
      stop_reason: null,
      routed_experts: null,
      weight_version: turn.weight_version ?? null,
    };
    this.outputs.push(out);
    return out;
  }

  async detokenize(ids: number[]): Promise<string> {
    return decode(ids);
  }

  async tokenConventions(): Promise<EngineConventions> {
    return {
      eos_ids: [IM_END, ENDOFTEXT],
      end_of_turn_id: IM_END,
      image_pad_id: IMAGE_PAD,
      forbidden_response_ids: [IMAGE_PAD, VISION_START],
      special_ids: [IM_START, IM_END, ENDOFTEXT, IMAGE_PAD, VISION_START],
    };
  }
}

/** The episode workflow on a real Temporal dev server, its worker using one EngineDouble. */
export interface EpisodeHarness {
  engine: EngineDouble;
  client: Client;
  store: LocalBlobStore;
  server: TestServer;
  worker: RunningWorker;
  /** Runs one episode to its end under a fresh id; `script` answers its generate calls. */
  run(
    script: EpisodeScript,
    rollout?: Partial<RolloutConfig>,
    label?: string,
    opts?: { generate_timeout_s?: number },
  ): Promise<EpisodeRun>;
  stop(): Promise<void>;
}
export type EpisodeScript = (req: EngineGenerateRequest, n: number) => ScriptedTurn;
export interface EpisodeRun {
  id: string;
  input: EpisodeInput;
  summary: EpisodeSummary;
  sample: Sample;
  requests: EngineGenerateRequest[];
}

export async function startEpisodeHarness(runId: string): Promise<EpisodeHarness> {
  const scripts = new Map<string, EpisodeScript>();
  const counts = new Map<string, number>();
  const engine = new EngineDouble((req) => {
    const n = counts.get(req.session_id) ?? 0;
    counts.set(req.session_id, n + 1);
    return scripts.get(req.session_id)!(req, n);
  });
  const server = await startTestServer();
  const store = new LocalBlobStore(stateLayout(server.cfg.state_dir).blobs);
  const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#ffffff' } })
    .png()
    .toBuffer();
  const imageRef = await store.putBytes(png, 'png');
  const worker = await startRolloutWorker(server.cfg, {
    cfg: server.cfg,
    store,
    engines: () => engine,
    imageProcessor: { patch_size: 16, merge_size: 2, min_pixels: 1024, max_pixels: 16384 }, // 64×64 → 4 tokens
  });
  const client = await connectClient(server.cfg);
  let nextPrompt = 0;
  return {
    engine,
    client,
    store,
    server,
    worker,
    async run(script, rollout = {}, label = '60', opts = {}) {
      const settings = episodeSettings(RolloutConfig.parse({ max_turns: 3, max_response_len: 400, ...rollout }), {
        generate_timeout_s: opts.generate_timeout_s ?? 30,
      });
      const built = buildMessages(
        { id: 'p', problem: 'Find the area of triangle ABC.', answer: label, images: [imageRef] } as never,
        { tools: settings.multi_turn },
      );
      const input: EpisodeInput = {
        run_id: runId,
        step: 0,
        prompt_index: nextPrompt++,
        sample_index: 0,
        prompt: { messages: built.messages, tools: built.tools },
        label,
        settings,
        weight_version: 3,
      };
      const id = `${input.run_id}/${input.step}/${input.prompt_index}/${input.sample_index}`;
      scripts.set(id, script);
      const summary: EpisodeSummary = await client.workflow.execute(episode, {
        taskQueue: server.cfg.temporal.task_queues.rollout,
        workflowId: episodeWorkflowId(id),
        args: [input],
      });
      const sample = Sample.parse(await store.getJson(summary.sample_ref));
      return { id, input, summary, sample, requests: engine.requests.filter((r) => r.session_id === id) };
    },
    async stop() {
      await client.connection.close();
      await worker.stop();
      await server.stop();
    },
  };
}
