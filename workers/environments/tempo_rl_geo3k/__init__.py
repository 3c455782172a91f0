"""Geo3K written as a verifiers v1 environment (`python_env.id: tempo_rl_geo3k`): the same prompt
instruction, calc_score protocol and feedback as the TypeScript geo3k environment (lib/env/geo3k.ts),
its rows from a JSONL file (`path`) or inline (`rows`), graded by math-verify. The environment plays
the user: each assistant turn is read as geo3k's step reads it, and its feedback is the next user
turn. tests/ts/byo-geo3k.test.ts checks feedback and rewards against the TypeScript step."""

from __future__ import annotations

import base64
import json
import logging
import mimetypes
from pathlib import Path

import verifiers.v1 as vf

from .step import CALC_SCORE, StepResult, geo3k_step

logging.getLogger("math_verify").setLevel(logging.ERROR)

SYSTEM_PROMPT = "You are a helpful assistant that solves geometry problems step by step."
TOOL_INSTRUCTION = (
    "Reason step by step. You may check an answer with the calc_score tool, called as "
    '<tool_call>{"name": "calc_score", "arguments": {"answer": "..."}}</tool_call>. '
    "Put your final answer in \\boxed{}."
)


class Geo3kConfig(vf.TasksetConfig):
    path: str = ""
    """A JSONL file of rows {problem, answer, image?}: image a path beside the file or a data: URL."""
    rows: list[dict] = []
    """Rows given inline (instead of path)."""
    max_turns: int = 3


class Geo3kData(vf.TaskData):
    answer: str


class Geo3kTask(vf.Task[Geo3kData, vf.State, vf.TaskConfig]):
    pass


def _image_url(image: str, base: Path) -> str:
    if image.startswith("data:"):
        return image
    path = (base / image).resolve()
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


class Geo3kTaskset(vf.Taskset[Geo3kTask, Geo3kConfig]):
    def load(self):
        base = Path(self.config.path).parent if self.config.path else Path.cwd()
        rows = self.config.rows
        if self.config.path:
            rows = [json.loads(line) for line in Path(self.config.path).read_text().splitlines() if line.strip()]
        for i, row in enumerate(rows):
            question = str(row["problem"]).replace("<image>", "").strip()
            content: list[dict] = []
            if row.get("image"):
                content.append({"type": "image_url", "image_url": {"url": _image_url(str(row["image"]), base)}})
            content.append({"type": "text", "text": f"{question}\n\n{TOOL_INSTRUCTION}"})
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]
            yield Geo3kTask(
                Geo3kData(id=str(row.get("id", i)), prompt=messages, answer=str(row["answer"])), self.config.task
            )


class Geo3kEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()


class Geo3kEnv(vf.Env[Geo3kEnvConfig]):
    """The environment plays the user: geo3k's step reads each assistant turn; its feedback is the next
    user turn, until the step is done. The reward is the step's grade."""

    async def run(self, task, agents) -> None:
        max_turns = self.taskset.config.max_turns
        result: StepResult | None = None
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()
            turn = 1
            while not segment.terminated:
                result = geo3k_step(segment.last_reply, task.data.answer, turn, max_turns)
                interaction.trace.info.setdefault("steps", []).append(
                    {"turn": turn, "reason": result.reason, "score": result.score, "observation": result.observation}
                )
                if result.done or result.observation is None:
                    break
                segment = await interaction.turn(result.observation)
                turn += 1
        interaction.trace.record_reward("correct", float(result.score or 0) if result and result.done else 0.0, 1.0)


__all__ = ["Geo3kTaskset", "Geo3kEnv", "CALC_SCORE"]
