// A recorded GRPO run written straight to a state dir (step records, sample blobs, an image, the
// trainer's per-token logprobs), as a run leaves them, for the browser tests: no engine, no Temporal
// server. Its samples are in the engine double's character tokens, with the chat template's specials:
// a system and a user message around the figure's placeholder tokens, a first turn that stops on a
// stop string (a synthetic end-of-turn token follows it) and the tool's feedback, then a second turn.
import { writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import sharp from 'sharp';
import type { TempoConfig } from '../config/schema.js';
import type { Sample } from '../lib/contract.js';
import { stateLayout } from '../stores/layout.js';
import type { StepRecord } from '../protocol/activities.js';
import type { BlobStore } from '../stores/blobstore.js';
import { trainerLogprobsKey } from '../ui/trainer-logprobs.js';
import { encode, IM_END, IM_START, IMAGE_PAD, toolCall } from './episode-engine-double.js';

/** Long enough to be folded on the pages (its tools listed, as a real system prompt does). */
export const FIXTURE_SYSTEM = [
  'You answer with the calc_score tool.',
  '',
  '# Tools',
  '<tools>',
  '{"type": "function", "function": {"name": "calc_score"}}',
  '</tools>',
  '',
  'Call it within <tool_call></tool_call> XML tags.',
].join('\n');
export const FIXTURE_QUESTION = 'Find the measure of angle ABC in the figure.';

export interface FixtureRun {
  runId: string;
  /** The episode whose trainer logprobs differ from the engine's (token 3 by 0.6). */
  mismatchEpisode: string;
  /** Each step's train/pg_loss: small values (1e-4), for the plots' axes. */
  pgLoss: number[];
  evalBefore: number;
  evalAfter: number;
}

/** One sample: turn 1 a wrong answer ending on the stop string (synthetic EOS, then the feedback),
 *  turn 2 the label; sample 0 right in turn 1. */
function fixtureSample(runId: string, step: number, sample: number, image: string): Sample {
  const id = `${runId}/${step}/0/${sample}`;
  const right = sample === 0;
  const gen1 = encode(toolCall(right ? '60' : '7').replace(/ trailing text.*$/, ''));
  const obs = encode('\n<|im_start|>user\ncalc_score: 7 is wrong, try again.<|im_end|>\n<|im_start|>assistant\n');
  const gen2 = [...encode(toolCall('60').replace(/ trailing text.*$/, '')), IM_END];
  const turns: Sample['turns'] = [
    {
      engine: 'http://engine-0',
      weight_version: step,
      generated_tokens: gen1.length,
      observation_tokens: right ? 0 : obs.length,
      finish_reason: 'stop',
      tool_answer: right ? '60' : '7',
      tool_score: right ? 1 : 0,
    },
  ];
  const ids = [...gen1, IM_END];
  const mask: Array<0 | 1> = [...gen1.map(() => 1 as const), 0];
  if (!right) {
    ids.push(...obs, ...gen2);
    mask.push(...obs.map(() => 0 as const), ...gen2.map(() => 1 as const));
    turns.push({
      ...turns[0]!,
      generated_tokens: gen2.length,
      observation_tokens: 0,
      tool_answer: '60',
      tool_score: 1,
    });
  }
  return {
    schema_version: 1,
    episode_id: id,
    run_id: runId,
    step,
    prompt_index: 0,
    sample_index: sample,
    group_id: `${runId}/${step}/0`,
    prompt_ids: [
      IM_START,
      ...encode(`system\n${FIXTURE_SYSTEM}`),
      IM_END,
      ...encode('\n'),
      IM_START,
      ...encode('user\n'),
      ...Array(4).fill(IMAGE_PAD),
      ...encode(FIXTURE_QUESTION),
      IM_END,
      ...encode('\n'),
      IM_START,
      ...encode('assistant\n'),
    ],
    response_ids: ids,
    loss_mask: mask,
    rollout_logprobs: mask.map((m, i) => (m ? -((i * 0.37) % 3) : 0)),
    images: [image],
    reward: right ? 1 : 0.5,
    status: 'COMPLETED',
    truncated_reason: null,
    temperature: 1,
    label: '60',
    environment: 'geo3k',
    turns,
    routed_experts: null,
  };
}

/** `steps` steps of one prompt × 2 samples, trained; the eval before and after; tiny pg losses. */
export async function writeFixtureRun(
  cfg: TempoConfig,
  store: BlobStore,
  runId: string,
  opts: { steps?: number; evalBefore?: number; evalAfter?: number } = {},
): Promise<FixtureRun> {
  const steps = opts.steps ?? 3;
  const evalBefore = opts.evalBefore ?? 0.25;
  const evalAfter = opts.evalAfter ?? 0.75;
  const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#dbeafe' } })
    .png()
    .toBuffer();
  const image = await store.putBytes(png, 'png');
  const dir = path.join(stateLayout(cfg.state_dir).runs, runId, 'steps');
  mkdirSync(dir, { recursive: true });
  const pgLoss = Array.from({ length: steps }, (_, s) => 1.2e-4 + s * 0.9e-4);
  for (let step = 0; step < steps; step++) {
    const samples = [0, 1].map((s) => fixtureSample(runId, step, s, image));
    for (const s of samples) {
      await store.putJson(`samples/${s.episode_id}.json`, s);
      // the trainer's logprobs: the engine's, token 3 off by 0.6 in sample 1
      const logprobs = s.rollout_logprobs.map((lp, i) => (s.sample_index === 1 && i === 3 ? lp - 0.6 : lp + 0.001));
      await store.putJson(trainerLogprobsKey(s.episode_id), {
        schema_version: 1,
        episode_id: s.episode_id,
        step,
        logprobs,
      });
    }
    const last = step === steps - 1;
    const rec: StepRecord = {
      run_id: runId,
      step,
      metrics: {
        'rollout/raw_reward': 0.5 + 0.1 * step,
        'train/pg_loss': pgLoss[step]!,
        ...(step === 0 ? { 'eval_start/reward': evalBefore, 'eval_start/n': 4 } : {}),
        ...(last ? { 'eval/reward': evalAfter, 'eval/n': 4 } : {}),
      },
      weight_version: step + 1,
      episodes: samples.map((s) => ({ episode_id: s.episode_id, trained: true })),
      data_before: { epoch: 0, cursor: step },
      data_after: { epoch: 0, cursor: step + 1 },
    };
    writeFileSync(path.join(dir, `step-${step}.json`), JSON.stringify(rec));
  }
  return { runId, mismatchEpisode: `${runId}/0/0/1`, pgLoss, evalBefore, evalAfter };
}
