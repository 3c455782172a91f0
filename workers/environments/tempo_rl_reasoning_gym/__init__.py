"""reasoning-gym's procedurally generated tasks (https://github.com/open-thought/reasoning-gym, installed
unchanged from PyPI) as a verifiers v1 taskset (`python_env.id: tempo_rl_reasoning_gym`): one of its
datasets by name, seeded, each task's question the prompt, its own `score_answer` the reward. Played by
verifiers' plain chat harness: one answer, in \\boxed{}."""

from __future__ import annotations

from typing import Any

import reasoning_gym
import verifiers.v1 as vf
from verifiers.v1.utils.score import extract_boxed_answer

INSTRUCTION = "Give only your final answer, in \\boxed{}."


class ReasoningGymConfig(vf.TasksetConfig):
    dataset: str = "basic_arithmetic"
    """A reasoning-gym dataset name (reasoning_gym.create_dataset)."""
    size: int = 64
    seed: int = 0
    dataset_args: dict[str, Any] = {}
    """The dataset's own settings (e.g. max_terms for basic_arithmetic)."""


class ReasoningGymData(vf.TaskData):
    entry: dict[str, Any]
    """reasoning-gym's item (question, answer, metadata): what its score_answer reads."""


class ReasoningGymTask(vf.Task[ReasoningGymData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, trace) -> float:
        """reasoning-gym's own score of the last \\boxed{} of the reply (the reply itself without one)."""
        dataset = reasoning_gym.get_score_answer_fn(self.data.entry["metadata"]["source_dataset"])
        return float(dataset(extract_boxed_answer(trace.last_reply), self.data.entry))


class ReasoningGymTaskset(vf.Taskset[ReasoningGymTask, ReasoningGymConfig]):
    def load(self):
        c = self.config
        dataset = reasoning_gym.create_dataset(c.dataset, size=c.size, seed=c.seed, **c.dataset_args)
        for i, entry in enumerate(dataset):
            prompt = [{"role": "user", "content": f"{entry['question']}\n\n{INSTRUCTION}"}]
            data = ReasoningGymData(id=f"{c.dataset}-{c.seed}-{i}", prompt=prompt, entry=_jsonable(entry))
            yield ReasoningGymTask(data, c.task)


def _jsonable(entry: dict) -> dict:
    """The item as task data (it travels in verifiers' traces as JSON)."""
    import json

    return json.loads(json.dumps(entry, default=str))


__all__ = ["ReasoningGymTaskset"]
