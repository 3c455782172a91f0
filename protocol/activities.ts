// The rollout worker's activities as the workflows see them: every activity's input and result, and
// RolloutActivities, the one interface the workflows proxy and activities/index.ts implements. Pure
// types: it imports nothing from workflows/ or activities/, only types from lib/ and config/.
//
// Token arrays travel by reference: the prompt's ids, each turn's output and the stitched trajectory
// live in the blob store, and the history keeps their refs and counts. The trajectory is stitched
// once, by the activities that add to it (generateTurn, renderObservation), with the pure
// lib/trajectory.ts; storeSample writes the sample from the stitched trajectory as it is.
import type { DatasetConfig } from '../config/schema.js';
import type { EnvStepInput, EnvStepResult, JsonValue } from '../lib/env/types.js';
import type { RewardMatch } from '../lib/math/options.js';
import type { DataCursor } from '../lib/prompt-order.js';
import type { EpisodeStatus, Stop, TokenConventions } from '../lib/trajectory.js';
import type { ToolSpec } from '../engine/types.js';
import type { EpisodeMessage, EpisodeSummary, OpenEnvSettings } from './episode.js';
import type { DatasetInfo } from './training-run.js';

/** Where a task says its run's store is (a store URI): a worker of another store refuses the task.
 *  Absent (work started by hand, outside a run): the worker's own store. */
export interface RunBlobStore {
  blob_store?: string;
}

export interface ResponseLimits {
  max_response_len: number;
  max_context_len: number;
}

export interface SamplingSettings {
  max_tokens: number;
  temperature: number;
  top_p: number;
  seed: number;
  stop: string[];
}

export interface RenderPromptInput {
  episode_id: string;
  messages: EpisodeMessage[];
  tools: ToolSpec[];
}

export interface RenderPromptResult {
  engine: string;
  /** Blob with {prompt_ids, features}. */
  prompt_ref: string;
  prompt_len: number;
  image_refs: string[];
  conventions: TokenConventions;
  image_tokens: { in_prompt: number; expected: number | null; engine_reported: number | null };
}

/** Where the stitched trajectory of an episode stands after an activity added to it. */
export interface TrajectoryStep {
  /** Blob with the trajectory so far (StoredTrajectory); null: nothing stitched yet. */
  trajectory_ref: string | null;
  /** Response-side tokens so far (generated, synthetic EOS, observations). */
  response_len: number;
  /** Why the episode cannot go on after this addition, or null. */
  stop: Stop | null;
  /** A forbidden (image/vision) token anywhere on the response side: the episode fails with this. */
  forbidden: Stop | null;
}

export interface GenerateTurnInput {
  episode_id: string;
  turn: number;
  prompt_ref: string;
  /** The trajectory the turn continues (null: the first turn); the turn's tokens are stitched onto it. */
  trajectory_ref: string | null;
  limits: ResponseLimits;
  conventions: TokenConventions;
  sampling: SamplingSettings;
  /** The weights the episode runs on; a generation stamped with other weights is retried elsewhere. */
  expected_weight_version?: number;
  /** The async window (rollout.max_staleness > 0): the engines move on while the episode runs, so any
   *  weights at least this new are accepted; older ones (an engine a sync missed) are retried elsewhere. */
  min_weight_version?: number;
  /** rollout.sync_in_flight abort: a request the engine aborted (a weight sync) is generated again. */
  regenerate_aborted?: boolean;
}

export interface GenerateTurnResult extends TrajectoryStep {
  engine: string;
  attempt: number;
  /** The turn's own output, for the audit: counts and the mean logprob, not the arrays. */
  generated_tokens: number;
  mean_logprob: number | null;
  /** A stop-string finish without an EOS: the stitcher added the end-of-turn token. */
  synthetic_eos: boolean;
  finish_reason: string;
  stop_reason: string | number | null;
  /** What the environment reads: the tokens' text without the trailing EOS (the ids stay exact). */
  text: string;
  /** Blob with {token_ids, logprobs, routed_experts} of this turn. */
  output_ref: string;
  /** The engine's weight version; null when the engine reports none (the turn is recorded as unknown). */
  weight_version: number | null;
  has_routed_experts: boolean;
}

export interface RenderObservationInput {
  episode_id: string;
  observation: string;
  /** The messages the environment answered with (a Python environment's tool results and user
   *  turns), rendered in place of one user message holding `observation`. Text only. */
  messages?: EpisodeMessage[];
  tools: ToolSpec[];
  /** The trajectory the observation is stitched onto (it ends with a generated turn). */
  trajectory_ref: string;
  conventions: TokenConventions;
}

export interface RenderObservationResult extends TrajectoryStep {
  engine: string;
  /** Tokens the observation added to the response side (0 when it did not fit). */
  observation_tokens: number;
}

export type EnvStepActivityInput = EnvStepInput & {
  environment: string;
  /** The state the previous step returned (or the episode input's initial state). Absent (episodes
   *  started by hand): the environment's initial state. */
  state?: JsonValue;
};

/** The step's result and the state to pass to the next step. */
export type EnvStepActivityResult = EnvStepResult & { state?: JsonValue };

export interface ScoreInput {
  label: string;
  /** Absolute tolerance (docs/reward.md); 0: off. */
  tolerance: number;
  /** Default 'exact'. */
  match?: RewardMatch;
  /** The answer the environment ended with (tool call, \boxed{} or last line). */
  final_answer: string | null;
  /** Without a final answer: the response text whose last \boxed{} is graded (single-turn mode). */
  response_text: string | null;
  /** Whose grade the math RM is (rollout.environment); absent: the math RM itself. */
  environment?: string;
}

export interface ScoreResult {
  reward: number;
  extracted: string | null;
  reason: string;
}

/** What the sample keeps of a turn beyond its tokens (those are in the stitched trajectory). */
export interface SampleTurn {
  engine: string;
  /** null: the engine reported no weight version (unknown, never assumed). */
  weight_version: number | null;
  finish_reason: string;
  /** Multi-turn: the answer a tool call of this turn gave (calc_score, submit; null: none, another tool, or malformed), and its grade. */
  tool_answer?: string | null;
  tool_score?: number | null;
}

export interface StoreSampleInput extends RunBlobStore {
  episode_id: string;
  run_id: string;
  step: number;
  prompt_index: number;
  sample_index: number;
  prompt_ref: string | null;
  /** The stitched trajectory (null: nothing was generated). */
  trajectory_ref: string | null;
  limits: ResponseLimits;
  turns: SampleTurn[];
  images: string[];
  reward: number;
  status: EpisodeStatus;
  truncated_reason: string | null;
  temperature: number;
  label: string;
  environment: string;
}

export interface LoadEpisodeSummaryInput extends RunBlobStore {
  episode_id: string;
  /** The episode's (its turns may hold null where the engine reported none). */
  weight_version?: number;
}

export interface EpisodePromptsInput {
  dataset_ref: string;
  indices: number[];
  multi_turn: boolean;
  system_prompt: string | null;
  environment?: string;
}

export interface EpisodePrompt {
  row_id: string;
  dataset_index: number;
  label: string;
  prompt: { messages: EpisodeMessage[]; tools: ToolSpec[] };
  env_state: JsonValue;
}

export interface StepRecord {
  run_id: string;
  step: number;
  metrics: Record<string, number>;
  weight_version: number;
  episodes: Array<{ episode_id: string; trained: boolean }>;
  data_before: DataCursor;
  data_after: DataCursor;
}

export interface SftBatchInput extends RunBlobStore {
  run_id: string;
  step: number;
  dataset_ref: string;
  indices: number[];
  limits: ResponseLimits;
}

export interface SftBatchResult {
  /** id: the sample's own id (sft/<run>/<step>/<i>); record_id: the SFT record it came from. */
  samples: Array<{ id: string; record_id: string; sample_ref: string; response_len: number; mask_sum: number }>;
  skipped: Array<{ id: string; reason: string }>;
}

export type SftDatasetInfo = DatasetInfo & { skipped: Array<{ row: number; reason: string }>; skipped_count: number };

export interface RolloutActivities {
  /** strata: also each train row's stratum (train_strata), for prompt_order stratified. */
  prepareDataset(input: {
    run_id: string;
    dataset: DatasetConfig;
    environment?: string;
    strata?: boolean;
  }): Promise<DatasetInfo>;
  prepareSftDataset(input: {
    run_id: string;
    path: string;
    dataset: DatasetConfig;
    environment?: string;
  }): Promise<SftDatasetInfo>;
  episodePrompts(input: EpisodePromptsInput): Promise<EpisodePrompt[]>;
  episodeOutcomes(input: { ids: string[] }): Promise<Array<EpisodeSummary | 'running' | 'gone'>>;
  listEngines(): Promise<string[]>;
  recordStep(rec: StepRecord): Promise<void>;
  renderPrompt(input: RenderPromptInput): Promise<RenderPromptResult>;
  renderObservation(input: RenderObservationInput): Promise<RenderObservationResult>;
  generateTurn(input: GenerateTurnInput): Promise<GenerateTurnResult>;
  envStep(input: EnvStepActivityInput): Promise<EnvStepActivityResult>;
  scoreEpisode(input: ScoreInput): Promise<ScoreResult>;
  storeSample(input: StoreSampleInput): Promise<{ sample_ref: string }>;
  loadEpisodeSummary(input: LoadEpisodeSummaryInput): Promise<EpisodeSummary | null>;
  renderSftBatch(input: SftBatchInput): Promise<SftBatchResult>;
}

/** The environment worker's activities (workers/environments, Python, on the stack's environments
 *  queue): one verifiers episode, its model calls sent back to the episode as modelCall updates. */
export interface VerifiersEpisodeInput {
  workflow_id: string;
  task_index: number;
  environment: { id: string; args: Record<string, unknown>; harness: string };
}

export interface VerifiersEpisodeResult {
  /** The episode ran to its end without an error of the environment or its harness. */
  ok: boolean;
  /** The trace's reward: its rewards weighted and summed. */
  reward: number;
  rewards: Record<string, number | null>;
  errors: string[];
  model_calls: number;
  stop_condition: string | null;
}

/** An OpenEnv server as the environment worker reaches it (python_env.openenv, less what only the
 *  workflow reads). */
export type OpenEnvSpec = Omit<OpenEnvSettings, 'reward'>;

export interface OpenEnvResetInput {
  workflow_id: string;
  environment: OpenEnvSpec;
  /** The reset's arguments: python_env.args, the row's task index as `seed`, the episode id. */
  reset: Record<string, unknown>;
}

/** What the history keeps to rebuild a session: the digest of the reset's answer, and each action
 *  sent with the digest of its answer (workers/environments/environments/openenv_env.py). */
export interface OpenEnvRecord {
  reset: string;
  steps: Array<{ action: Record<string, unknown>; digest: string }>;
}

export interface OpenEnvStepInput extends OpenEnvResetInput {
  recorded: OpenEnvRecord;
  /** The model's turn (its text without the trailing EOS): the action is parsed from it. */
  text: string;
  turn: number;
}

export interface OpenEnvAnswer {
  /** What the model reads next: the observation's text (or why there was no action). */
  observation: string;
  reward: number | null;
  done: boolean;
  /** The answer's digest (null: nothing was sent). */
  digest: string | null;
  /** The server's state when it is JSON and small (for the record: it cannot be written back). */
  state: JsonValue | null;
  /** stepped, done, refused (the server's validation refused the action), no_action: why, reset. */
  reason: string;
  /** The worker that holds the session: the next step goes to its queue. */
  session_queue: string;
}

export interface OpenEnvResetResult extends OpenEnvAnswer {
  /** The step tool (the environment's action schema) in tool mode; none in text mode. */
  tools: ToolSpec[];
  openenv_version: string;
}

export interface OpenEnvStepResult extends OpenEnvAnswer {
  /** The action sent (recorded for a rebuild), or null when the turn had none. */
  action: Record<string, unknown> | null;
  /** Actions replayed to rebuild the session before this one (0: the session was live). */
  replayed: number;
}

export interface EnvironmentActivities {
  runVerifiersEpisode(input: VerifiersEpisodeInput): Promise<VerifiersEpisodeResult>;
  openenvReset(input: OpenEnvResetInput): Promise<OpenEnvResetResult>;
  openenvStep(input: OpenEnvStepInput): Promise<OpenEnvStepResult>;
  openenvClose(input: { workflow_id: string }): Promise<void>;
}
