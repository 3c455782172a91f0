// The episode workflow's contract: its input, its result, its query, and its workflow id.
// Pure (imported by the workflow bundle, the activities, the training run and the CLI); it imports
// nothing from workflows/ or activities/, only types from lib/.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { JsonValue } from '../lib/env/types.js';
import type { RewardMatch } from '../lib/math/options.js';
import type { EpisodeStatus } from '../lib/trajectory.js';
import type { ChatMessage, ToolSpec } from '../engine/types.js';

export const EPISODE_WORKFLOW_TYPE = 'episode';

/** A chat message of the first conversation (the engine's message type); image parts carry blob
 *  references, not bytes, until the render step resolves them. */
export type EpisodeMessage = ChatMessage;

export interface EpisodeSettings {
  /** false: one generate, no tools, the reward from the response's \boxed{} (vime's single-turn run). */
  multi_turn: boolean;
  max_turns: number;
  max_response_len: number;
  max_context_len: number;
  temperature: number;
  top_p: number;
  seed: number;
  /** Stop strings: the environment's in multi-turn mode (after a tool call), none in single-turn. */
  stop: string[];
  /** Absent: 'exact' (also in histories recorded before the setting existed). */
  reward_match?: RewardMatch;
  /** Absolute tolerance of the math RM; 0: off. */
  reward_tolerance: number;
  /** Out of turns → TRUNCATED (true) or COMPLETED (false). */
  truncate_status_when_out_of_turns: boolean;
  /** rollout.environment: the registered environment (lib/env/registry.ts) that steps and grades. */
  environment: string;
  /** Per generate attempt; the retry policy moves to another engine after it. */
  generate_timeout_s: number;
  /** rollout.max_staleness when > 0 (absent: 0, synchronous): engines may move to newer weights while
   *  the episode runs, and each turn records the version that generated it. */
  max_staleness?: number;
  /** With max_staleness: what a weight sync does with this episode's request in flight. */
  sync_in_flight?: 'keep' | 'abort' | 'wait';
  /** A Python environment (rollout.environment verifiers or openenv), served by the environment worker:
   *  a verifiers harness whose model calls are modelCall updates of the workflow, or an OpenEnv
   *  server the workflow steps turn by turn (docs/environments.md). */
  python_env?: PythonEnvSettings;
}

/** python_env of the config, as an episode runs it. */
export interface PythonEnvSettings {
  kind: 'verifiers' | 'openenv';
  /** The taskset id: an installed module exporting a verifiers v1 Taskset. */
  id: string;
  /** verifiers: the taskset's config fields. openenv: the reset's arguments beside the seed. */
  args: Record<string, unknown>;
  harness: string;
  /** kind openenv: the server and how turns become actions (python_env.openenv of the config). */
  openenv?: OpenEnvSettings;
  /** The stack's environment queue (temporal.task_queues.environments). */
  task_queue: string;
  /** One attempt of the environment's episode; a hung environment is cut here and retried. */
  episode_timeout_s: number;
  /** Attempts of the environment's episode (a crashed or hung worker is retried; each retry replays). */
  attempts: number;
}

/** python_env.openenv of the config (config/schema.ts has the meaning of each). */
export interface OpenEnvSettings {
  url: string;
  app: string;
  action: 'tool' | 'text';
  text_field: string;
  observation_field: string;
  reward: 'sum' | 'last';
  step_timeout_s: number;
}

/** One model call of a Python environment's harness: the messages it adds to the conversation (all
 *  of them at call 0; after that those after the last assistant turn) and a digest of the whole request. */
export interface ModelCallRequest {
  call: number;
  digest: string;
  messages: EpisodeMessage[];
  /** The tools the request offers (call 0; later calls must offer the same: the digest covers them). */
  tools: ToolSpec[];
}

export interface ModelCallResult {
  text: string;
  finish_reason: string;
  prompt_tokens: number;
  completion_tokens: number;
}

/** Sent by the environment worker's model gateway (workers/environments/environments/gateway.py). */
export const modelCallUpdate = defineUpdate<ModelCallResult, [ModelCallRequest]>('modelCall');

export interface EpisodeInput {
  run_id: string;
  step: number;
  prompt_index: number;
  sample_index: number;
  prompt: { messages: EpisodeMessage[]; tools: ToolSpec[] };
  label: string;
  settings: EpisodeSettings;
  /** The environment's initial state for this prompt (Environment.initialState of its row). Absent in
   *  inputs made before environments kept state: the first step starts from the initial state. */
  env_state?: JsonValue;
  weight_version: number;
  /** The run's blob store (plan.blob_store, a store URI): a worker that does not reach it refuses the
   *  sample. Absent (an episode started by hand, outside a run): the worker's own store. */
  blob_store?: string;
  /** The async window: the training run's workflow id, signalled with the summary when the episode
   *  ends (the episode outlives the workflow run that started it). */
  report_to?: string;
}

export interface EpisodeSummary {
  /** Per turn: the calc_score answer the environment parsed, or null (no call, or a malformed one). Absent: single-turn. */
  tool_answers?: Array<string | null>;
  /** The first calc_score answer graded right or wrong; null when the first turn had none. */
  first_answer?: 'correct' | 'wrong' | null;
  episode_id: string;
  sample_ref: string;
  reward: number;
  status: EpisodeStatus;
  truncated_reason: string | null;
  response_len: number;
  turns: number;
  weight_version: number;
}

export interface EpisodeProgress {
  episode_id: string;
  phase: 'render' | 'generate' | 'env' | 'observation' | 'score' | 'store' | 'done';
  turn: number;
  response_len: number;
  budget: number;
  status: EpisodeStatus | null;
}

export const episodeProgressQuery = defineQuery<EpisodeProgress>('episodeProgress');
/** Sent by an episode of the async window to its run (EpisodeInput.report_to) when it ends. */
export const episodeDoneSignal = defineSignal<[EpisodeSummary]>('episodeDone');

export function episodeId(p: { run_id: string; step: number; prompt_index: number; sample_index: number }): string {
  return `${p.run_id}/${p.step}/${p.prompt_index}/${p.sample_index}`;
}

/** The GRPO group of an episode: its run/step/prompt (the one definition: the stored sample and the
 *  train step's advantages both use it). */
export function groupId(p: { run_id: string; step: number; prompt_index: number }): string {
  return `${p.run_id}/${p.step}/${p.prompt_index}`;
}

export function episodeWorkflowId(id: string): string {
  return `episode/${id}`;
}

export function parseEpisodeId(id: string): {
  run_id: string;
  step: number;
  prompt_index: number;
  sample_index: number;
} {
  const parts = id.split('/');
  // digits only: Number() reads '' as 0, '0x1' as 1 and '1e3' as 1000
  const nums = parts.slice(-3).map((p) => (/^(0|[1-9][0-9]*)$/.test(p) ? Number(p) : Number.NaN));
  if (parts.length < 4 || parts[0] === '' || !nums.every((n) => Number.isSafeInteger(n)))
    throw new Error(`not an episode id (run/step/prompt/sample): ${JSON.stringify(id)}`);
  return { run_id: parts.slice(0, -3).join('/'), step: nums[0]!, prompt_index: nums[1]!, sample_index: nums[2]! };
}

/** Geo3K's name and stop strings: the environment of settings made without one. */
const GEO3K_STOP = { name: 'geo3k', stop: ['</tool_call>'] } as const;

/**
 * Settings from the rollout config and its environment (config/run-plan.ts passes the registered one:
 * this module is in the workflow bundle and does not load the registry). The one place that picks
 * defaults such as the stop string: the environment's in multi-turn mode, none in single-turn.
 */
export function episodeSettings(
  rollout: {
    environment?: string;
    multi_turn: boolean;
    max_turns: number;
    max_response_len: number;
    max_context_len: number;
    temperature: number;
    seed: number;
    reward_tolerance: number;
    reward_match?: RewardMatch;
    truncate_status_when_out_of_turns: boolean;
    max_staleness?: number;
    sync_in_flight?: 'keep' | 'abort' | 'wait';
  },
  opts: {
    generate_timeout_s?: number;
    env?: { name: string; stop: readonly string[] };
    stop?: string[];
    python_env?: PythonEnvSettings;
  } = {},
): EpisodeSettings {
  const env = opts.env ?? GEO3K_STOP;
  if (rollout.environment !== undefined && rollout.environment !== env.name)
    throw new Error(
      `episode settings: rollout.environment is ${JSON.stringify(rollout.environment)} but the stop strings given are ${JSON.stringify(env.name)}'s`,
    );
  return {
    multi_turn: rollout.multi_turn,
    max_turns: rollout.multi_turn ? rollout.max_turns : 1,
    max_response_len: rollout.max_response_len,
    max_context_len: rollout.max_context_len,
    temperature: rollout.temperature,
    top_p: 1, // the full distribution: the one the trainer scores
    seed: rollout.seed,
    stop: opts.stop ?? (rollout.multi_turn ? [...env.stop] : []),
    ...(rollout.reward_match && rollout.reward_match !== 'exact' ? { reward_match: rollout.reward_match } : {}),
    reward_tolerance: rollout.reward_tolerance,
    truncate_status_when_out_of_turns: rollout.truncate_status_when_out_of_turns,
    environment: env.name,
    generate_timeout_s: opts.generate_timeout_s ?? 300,
    ...(rollout.max_staleness
      ? { max_staleness: rollout.max_staleness, sync_in_flight: rollout.sync_in_flight ?? 'keep' }
      : {}),
    ...(opts.python_env ? { python_env: opts.python_env } : {}),
  };
}

/** A 31-bit seed per (run seed, episode, turn): samples of one prompt differ, replays agree. */
export function turnSeed(seed: number, id: string, turn: number): number {
  let h = 0x811c9dc5;
  for (const ch of `${seed}|${id}|${turn}`) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h & 0x7fffffff;
}

/**
 * Start options for an episode (client start or child workflow): its deterministic id, and a reuse
 * policy under which an episode that already completed is never run again — a retried step gets
 * WorkflowExecutionAlreadyStarted and reads the summary back (activity `loadEpisodeSummary`).
 */
/** A workflow task that a killed worker held is handed to another after this (Temporal's default is
 *  10 s); tempo-rl's workflow tasks take well under a second even replaying a whole step. */
export const WORKFLOW_TASK_TIMEOUT = '4 seconds';

export function episodeStartOptions(id: string) {
  return {
    workflowId: episodeWorkflowId(id),
    workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY' as const,
    workflowTaskTimeout: WORKFLOW_TASK_TIMEOUT,
  };
}

/** The summary's tool fields from an episode's turns — as the workflow records them, or as the stored
 *  sample keeps them (a redone step): each multi-turn turn has tool_answer (null: none or malformed)
 *  and tool_score; single-turn turns have neither, and give no tool fields. */
export function toolSummaryOf(
  turns: Array<{ tool_answer?: string | null; tool_score?: number | null }>,
): Pick<EpisodeSummary, 'tool_answers' | 'first_answer'> {
  const first = turns[0];
  if (!first || first.tool_answer === undefined) return {};
  const graded = first.tool_answer !== null && first.tool_score !== null && first.tool_score !== undefined;
  return {
    tool_answers: turns.map((t) => t.tool_answer ?? null),
    first_answer: graded ? (first.tool_score! > 0 ? 'correct' : 'wrong') : null,
  };
}
