// GRPO groups (run/step/prompt) of a step's rows, and the advantages the trainer gives a group's
// trained samples: workers/trainer/step/grpo.py group_advantages, (r − mean) / (std_unbiased + 1e-6),
// exactly 0 when the group's rewards are all equal; Dr.GRPO (grpo.dr_grpo): r − mean.

const STD_EPS = 1e-6;

export function groupAdvantages(rewards: number[], drGrpo: boolean): number[] {
  if (rewards.every((r) => r === rewards[0])) return rewards.map(() => 0);
  const n = rewards.length;
  const mean = rewards.reduce((a, b) => a + b, 0) / n;
  const centred = rewards.map((r) => r - mean);
  if (drGrpo) return centred;
  const std = Math.sqrt(centred.reduce((a, c) => a + c * c, 0) / (n - 1));
  return centred.map((c) => c / (std + STD_EPS));
}

/** What grouping reads of a row. */
export interface GroupMember {
  group_id: string;
  prompt_index: number;
  sample_index: number;
  reward: number | null;
  label: string | null;
}

export interface Group<R extends GroupMember> {
  group_id: string;
  prompt_index: number;
  label: string | null;
  /** Mean and (unbiased) std of the rewards of its samples that have one. */
  mean_reward: number | null;
  std_reward: number | null;
  rows: R[];
}

export function groupsOf<R extends GroupMember>(rows: R[]): Array<Group<R>> {
  const byId = new Map<string, R[]>();
  for (const r of rows) byId.set(r.group_id, [...(byId.get(r.group_id) ?? []), r]);
  return [...byId.entries()]
    .map(([group_id, members]) => {
      members.sort((a, b) => a.sample_index - b.sample_index);
      const rewards = members.map((r) => r.reward).filter((r): r is number => r !== null);
      const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
      const std =
        mean !== null && rewards.length > 1
          ? Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / (rewards.length - 1))
          : null;
      return {
        group_id,
        prompt_index: members[0]!.prompt_index,
        label: members.find((r) => r.label !== null)?.label ?? null,
        mean_reward: mean,
        std_reward: std,
        rows: members,
      };
    })
    .sort((a, b) => a.prompt_index - b.prompt_index);
}
