"""verifiers (v1 API, `import verifiers.v1 as vf`) environments: loaded once per worker process and
kept serving, each episode one `runVerifiersEpisode` activity whose model calls go through the
durable gateway (gateway.py)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio import activity
from temporalio.client import Client

from . import gateway as gw
from .errors import BAD_ENVIRONMENT, ENVIRONMENT_FAILED, NOT_INSTALLED, fail

log = logging.getLogger("environments.verifiers")

SUPPORTED_VERIFIERS = "0.4."
"""The verifiers releases whose v1 API this worker drives (pinned in workers/environments/pyproject.toml)."""


class VerifiersSpec(BaseModel):
    """python_env in the config (config/schema.ts PythonEnvConfig), as the episode passes it."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    """The taskset id: an installed module that exports a vf.Taskset (and maybe its vf.Env)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """The taskset's config fields."""
    harness: str = "null"
    """The harness that plays the agent seat(s): verifiers' built-in chat loop by default."""


class EpisodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workflow_id: str = Field(min_length=1)
    task_index: int = Field(ge=0)
    environment: VerifiersSpec


def check_verifiers_version() -> str:
    version = importlib.metadata.version("verifiers")
    if not version.startswith(SUPPORTED_VERIFIERS):
        raise fail(
            BAD_ENVIRONMENT,
            f"verifiers {version} is installed; the environment worker drives the v1 API of verifiers"
            f" {SUPPORTED_VERIFIERS}x (workers/environments/pyproject.toml)",
        )
    return version


def import_taskset_module(taskset_id: str):
    """The taskset's module, or a clear failure: not installed, or a v0 environment."""
    from verifiers.v1.utils.loaders import import_taskset

    try:
        module = import_taskset(taskset_id)
    except ModuleNotFoundError as err:
        raise fail(
            NOT_INSTALLED,
            f"verifiers environment {taskset_id!r} is not installed in the environment worker's Python ({err});"
            " install its package there (docs/environments.md)",
        ) from None
    except Exception as err:  # noqa: BLE001 - the environment's own import failed: name it
        raise fail(
            BAD_ENVIRONMENT, f"verifiers environment {taskset_id!r} failed to import: {type(err).__name__}: {err}"
        ) from None
    import verifiers.v1 as vf

    exported = [getattr(module, n, None) for n in getattr(module, "__all__", [])]
    if not any(isinstance(o, type) and issubclass(o, vf.Taskset) for o in exported):
        old = " It has load_environment(): a verifiers v0 environment;" if hasattr(module, "load_environment") else ""
        raise fail(
            BAD_ENVIRONMENT,
            f"verifiers environment {taskset_id!r} exports no vf.Taskset in __all__.{old} the environment worker runs"
            f" the v1 API (verifiers {SUPPORTED_VERIFIERS}x: taskset + harness)",
        )
    return module


@dataclass
class LoadedEnv:
    env: Any
    stack: contextlib.AsyncExitStack
    tasks: list[Any] = field(default_factory=list)
    reader: Iterator[Any] | None = None


class VerifiersEnvironments:
    """The verifiers environments this worker process has loaded, each serving until it stops."""

    def __init__(self, client: Client, heartbeat_s: float = 2.0) -> None:
        self.client = client
        self.heartbeat_s = heartbeat_s
        self.loaded: dict[str, LoadedEnv] = {}
        self.lock = asyncio.Lock()
        gw.install()

    async def env(self, spec: VerifiersSpec) -> LoadedEnv:
        key = spec.model_dump_json()
        async with self.lock:
            if key not in self.loaded:
                self.loaded[key] = await self._load(spec)
            return self.loaded[key]

    async def _load(self, spec: VerifiersSpec) -> LoadedEnv:
        import verifiers.v1 as vf

        check_verifiers_version()
        import_taskset_module(spec.id)
        try:
            config = vf.resolve_env_config(env_config(spec))
            env = vf.load_environment(config)
        except Exception as err:  # noqa: BLE001
            raise fail(
                BAD_ENVIRONMENT,
                f"verifiers environment {spec.id!r} with args {json.dumps(spec.args)}: {type(err).__name__}: {err}",
            ) from None
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(env.serving())
        return LoadedEnv(env=env, stack=stack)

    def task(self, loaded: LoadedEnv, index: int, spec: VerifiersSpec):
        """Task `index` of the taskset (read once, in order, as far as needed: a taskset may be infinite)."""
        if loaded.reader is None:
            loaded.reader = iter(loaded.env.taskset)
        loaded.tasks.extend(itertools.islice(loaded.reader, max(0, index + 1 - len(loaded.tasks))))
        if len(loaded.tasks) <= index:
            raise fail(
                BAD_ENVIRONMENT,
                f"verifiers environment {spec.id!r} has {len(loaded.tasks)} tasks; task {index} was asked for",
            )
        return loaded.tasks[index]

    async def close(self) -> None:
        for loaded in self.loaded.values():
            await loaded.stack.aclose()
        self.loaded.clear()

    @activity.defn(name="runVerifiersEpisode")
    async def run_episode(self, raw: dict) -> dict:
        try:
            req = EpisodeRequest.model_validate(raw)
        except Exception as err:  # noqa: BLE001
            raise fail(BAD_ENVIRONMENT, f"runVerifiersEpisode: {err}") from None
        loaded = await self.env(req.environment)
        task = self.task(loaded, req.task_index, req.environment)
        beat = asyncio.create_task(self._heartbeat())
        gateway = gw.ModelGateway(self.client.get_workflow_handle(req.workflow_id))
        gw.GATEWAYS[req.workflow_id] = gateway
        try:
            import verifiers.v1 as vf

            ctx = vf.ModelContext(model="tempo-rl", client=gw.GatewayClientConfig(workflow_id=req.workflow_id))
            episode = await loaded.env.run_slot(loaded.env.slots(task)[0], ctx)
        finally:
            beat.cancel()
            gw.GATEWAYS.pop(req.workflow_id, None)
        if gateway.fatal is not None:
            raise fail(*gateway.fatal)
        return episode_result(episode, gateway.calls, req.environment.id)

    async def _heartbeat(self) -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(self.heartbeat_s)


def env_config(spec: VerifiersSpec) -> dict:
    """The env config of a spec: its taskset and arguments, and every agent seat played by the spec's
    harness as a local process beside the worker (no container, no remote sandbox)."""
    import verifiers.v1 as vf
    from verifiers.v1.configs.agent import agent_config_fields

    raw: dict[str, Any] = {
        "taskset": {"id": spec.id, **spec.args},
        # Whole-episode retries would restart the model calls at 0 under one gateway: the activity retries.
        "retries": {"max_retries": 0},
    }
    seats = agent_config_fields(vf.resolve_env_config(raw))
    for seat in seats:
        raw[seat] = {"harness": {"id": spec.harness}, "runtime": {"type": "subprocess"}}
    return raw


def episode_result(episode: Any, calls: int, env_id: str) -> dict:
    """The activity's result: the reward (the trace's weighted rewards), each reward, the errors."""
    if len(episode.traces) != 1:
        raise fail(
            BAD_ENVIRONMENT,
            f"verifiers environment {env_id!r} played {len(episode.traces)} agent runs in one episode; tempo-rl trains"
            " one token sequence per episode (single-agent environments)",
        )
    trace = episode.traces[0]
    errors = [f"{e.type}: {e.message}" for e in episode.errors]
    errors += [f"{e.type}: {e.message}" for e in getattr(trace, "errors", None) or []]
    rewards = {k: (None if r is None else float(r.value)) for k, r in trace.rewards.items()}
    reward = float(trace.reward)
    if reward != reward or reward in (float("inf"), float("-inf")):
        raise fail(
            ENVIRONMENT_FAILED, f"verifiers environment {env_id!r} returned a reward that is not finite ({reward})"
        )
    return {
        "ok": bool(episode.ok) and not errors,
        "reward": reward,
        "rewards": rewards,
        "errors": errors[:8],
        "model_calls": calls,
        "stop_condition": None if trace.stop_condition is None else str(trace.stop_condition),
    }
