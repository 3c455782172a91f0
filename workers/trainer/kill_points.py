"""Kill points (docs/certification.md): a trainer started with TEMPO_RL_KILL_AT SIGKILLs itself at a
named point of its work, so that a certification run dies exactly where it means to. The variable is a
JSON list of {point, phase: start | mid | end, after_ms (mid), nth (default 1), match (a text of the
workflow id), once (a file), pid_file (kill the process it names instead: the Temporal server)}; supervise/kill-points.ts reads the same list in the rollout worker and
documents each field. A point fires once across processes: the first to reach it creates its `once`
file. Points of an activity (train_step, sync_weights, …) fire around it through the worker's
interceptor; points the code names (checkpoint_commit: start before the commit's rename, end after it)
through reach()."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

KILL_AT_ENV = "TEMPO_RL_KILL_AT"


class KillPoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    point: str = Field(min_length=1)
    phase: str = Field(pattern="^(start|mid|end)$")
    after_ms: int | None = Field(default=None, ge=0)
    nth: int = Field(default=1, ge=1)
    match: str | None = None
    once: str = Field(min_length=1)
    # SIGKILL the process whose pid this JSON file names (its "pid": the Temporal server's record), not this one.
    pid_file: str | None = None

    @model_validator(mode="after")
    def _mid_has_delay(self) -> KillPoint:
        if self.phase == "mid" and self.after_ms is None:
            raise ValueError(f"point {self.point} phase mid needs after_ms")
        return self


def points_from_env(env: dict[str, str] | None = None) -> list[KillPoint]:
    raw = (env if env is not None else os.environ).get(KILL_AT_ENV, "")
    if not raw:
        return []
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{KILL_AT_ENV} is not JSON: {raw[:200]}") from err
    if not isinstance(items, list):
        raise ValueError(f"{KILL_AT_ENV} must be a JSON list: {raw[:200]}")
    return [KillPoint.model_validate(i) for i in items]


def _die(p: KillPoint) -> None:
    try:
        os.close(os.open(p.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    pid = int(json.loads(Path(p.pid_file).read_text())["pid"]) if p.pid_file else os.getpid()
    sys.stderr.write(f"kill point {p.point} {p.phase} (#{p.nth}): SIGKILL of process {pid}\n")
    sys.stderr.flush()
    os.kill(pid, signal.SIGKILL)


class KillPoints:
    def __init__(self, points: list[KillPoint]):
        self.points = points
        self._seen: dict[KillPoint, int] = {}
        self._lock = threading.Lock()

    def due(self, name: str, workflow_id: str = "", phase: str | None = None) -> list[KillPoint]:
        """The points of `name` (in `phase`, when given) whose turn it is, counting this arrival."""
        out = []
        with self._lock:
            for p in self.points:
                if p.point != name or (phase is not None and p.phase != phase):
                    continue
                if p.match is not None and p.match not in workflow_id:
                    continue
                self._seen[p] = self._seen.get(p, 0) + 1
                if self._seen[p] == p.nth:
                    out.append(p)
        return out

    def reach(self, name: str, phase: str, workflow_id: str = "") -> None:
        """A point the code names, reached in `phase` (the code calls it at start and at end)."""
        for p in self.due(name, workflow_id, phase):
            _die(p)

    def interceptor(self) -> Any:
        from temporalio import activity
        from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

        kills = self

        class _Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                info = activity.info()
                due = kills.due(info.activity_type, info.workflow_id or "")
                for p in due:
                    if p.phase == "start":
                        _die(p)
                timers = [threading.Timer(p.after_ms / 1000, _die, (p,)) for p in due if p.phase == "mid"]
                for t in timers:
                    t.daemon = True
                    t.start()
                try:
                    out = await self.next.execute_activity(input)
                    for p in due:
                        if p.phase == "end":
                            _die(p)
                    return out
                finally:
                    for t in timers:
                        t.cancel()

        class _Interceptor(Interceptor):
            def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
                return _Inbound(next)

        return _Interceptor()


_PROCESS: KillPoints | None = None


def process_kill_points() -> KillPoints:
    """This process's points (read once from the environment)."""
    global _PROCESS
    if _PROCESS is None:
        _PROCESS = KillPoints(points_from_env())
    return _PROCESS
