// Pure step statistics over episode summaries (used inside the trainingRun workflow).
import { groupId, parseEpisodeId, type EpisodeSummary } from '../protocol/episode.js';

export interface GroupSplit {
  kept: EpisodeSummary[];
  dropped_zero_std: number;
  failed: number;
}

/** The GRPO group of an episode (groupId of its id). */
export function groupKey(e: EpisodeSummary): string {
  return groupId(parseEpisodeId(e.episode_id));
}

/** Drops failed episodes (no sample) and, when asked, groups whose rewards are all equal. */
export function groupFilter(summaries: EpisodeSummary[], zeroStdFilter: boolean): GroupSplit {
  const usable = summaries.filter((e) => e.sample_ref && e.status !== 'FAILED' && e.status !== 'ABORTED');
  const failed = summaries.length - usable.length;
  if (!zeroStdFilter) return { kept: usable, dropped_zero_std: 0, failed };
  const groups = new Map<string, EpisodeSummary[]>();
  for (const e of usable) groups.set(groupKey(e), [...(groups.get(groupKey(e)) ?? []), e]);
  const kept: EpisodeSummary[] = [];
  let dropped = 0;
  for (const g of groups.values()) {
    if (g.every((e) => e.reward === g[0]!.reward)) dropped += g.length;
    else kept.push(...g);
  }
  return { kept, dropped_zero_std: dropped, failed };
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

export function rolloutMetrics(summaries: EpisodeSummary[], split: GroupSplit): Record<string, number> {
  const ok = summaries.filter((e) => e.status !== 'FAILED');
  return {
    'rollout/raw_reward': mean(ok.map((e) => e.reward)),
    'rollout/response_len': mean(ok.map((e) => e.response_len)),
    'rollout/turns': mean(ok.map((e) => e.turns)),
    'rollout/truncated_ratio': mean(ok.map((e) => (e.status === 'TRUNCATED' ? 1 : 0))),
    'rollout/aborted_ratio': mean(summaries.map((e) => (e.status === 'ABORTED' ? 1 : 0))),
    'rollout/failed': split.failed,
    'rollout/zero_std_dropped': split.dropped_zero_std,
    'rollout/n_episodes': summaries.length,
    'rollout/n_groups': new Set(summaries.map(groupKey)).size,
    'rollout/n_trained': split.kept.length,
    'rollout/total_response_tokens': ok.reduce((a, e) => a + e.response_len, 0),
    ...toolMetrics(summaries, 'rollout'),
  };
}

/** Tool use of multi-turn episodes: the share of turns with a parseable calc_score call, the share of
 *  first answers that are right, and of episodes with a wrong first answer, the share that ended right. */
export function toolMetrics(summaries: EpisodeSummary[], prefix: string): Record<string, number> {
  const ok = summaries.filter((e) => e.status !== 'FAILED' && e.tool_answers);
  const turns = ok.reduce((a, e) => a + e.tool_answers!.length, 0);
  const calls = ok.reduce((a, e) => a + e.tool_answers!.filter((x) => x !== null).length, 0);
  const wrongFirst = ok.filter((e) => e.first_answer === 'wrong');
  return {
    [`${prefix}/tool_call_rate`]: turns ? calls / turns : 0,
    [`${prefix}/first_turn_tool_call_rate`]: mean(ok.map((e) => (e.tool_answers![0] != null ? 1 : 0))),
    [`${prefix}/first_answer_correct`]: mean(ok.map((e) => (e.first_answer === 'correct' ? 1 : 0))),
    [`${prefix}/wrong_first_answers`]: wrongFirst.length,
    [`${prefix}/recovery_rate`]: mean(wrongFirst.map((e) => (e.reward > 0 ? 1 : 0))),
  };
}

export function evalMetricsOf(out: EpisodeSummary[]): Record<string, number> {
  const ok = out.filter((e) => e.status !== 'FAILED');
  return {
    'eval/reward': mean(ok.map((e) => e.reward)),
    'eval/response_len': mean(ok.map((e) => e.response_len)),
    'eval/n': ok.length,
    ...toolMetrics(out, 'eval'),
  };
}
