"""OpenEnv environments (openenv-core 0.3): the episode workflow owns the turn loop and calls these
activities — `openenvReset` at the start, `openenvStep` after each model turn, `openenvClose` when it
ends before the environment is done — each on the environment worker that holds the episode's
session (its own queue, `session_queue`), or on the shared queue when that worker is gone.

An OpenEnv session keeps its state in the server, and 0.3 has no way to set it, so the history holds
what rebuilds it: the reset's arguments and each action sent, with a digest of each answer. A step
that finds no live session here (its worker or server died, another worker took the step) rebuilds
one — a fresh session, reset with the same arguments, the recorded actions sent again, each answer
checked against the recorded digest — and then sends the new action. A rebuilt environment that
answers otherwise fails the episode, EnvironmentDiverged, naming the step. The state the server
reports (its `state`, when it is JSON) is returned with each answer and so kept in the history too,
for the record: it cannot be written back."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field
from temporalio import activity

from .errors import BAD_ENVIRONMENT, DIVERGED, ENVIRONMENT_FAILED, fail
from .openenv_client import MAX_ANSWER_BYTES, Answer, Client, answer_of, client_class, guarded, http_url, step_answer
from .openenv_server import LocalServer

log = logging.getLogger("environments.openenv")

SUPPORTED_OPENENV = "0.3."
"""The openenv-core releases whose protocol this worker speaks (pinned in workers/environments/pyproject.toml)."""
MAX_STATE_BYTES = 65_536
"""A state larger than this is not put into the history (it is in every step's result)."""
SESSION_IDLE_S = 900.0
"""A session no activity has used for this long is closed (its episode ended without closing it)."""
STEP_TOOL = "step"
TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


class OpenEnvSpec(BaseModel):
    """python_env.openenv in the config (config/schema.ts), as the episode passes it."""

    model_config = ConfigDict(extra="forbid")
    url: str = ""
    app: str = ""
    action: Literal["tool", "text"] = "tool"
    text_field: str = ""
    observation_field: str = ""
    step_timeout_s: float = Field(default=60.0, gt=0)

    @property
    def key(self) -> str:
        return self.app or self.url


class RecordedStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: dict[str, Any]
    digest: str


class Recorded(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reset: str
    steps: list[RecordedStep] = Field(default_factory=list)


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workflow_id: str = Field(min_length=1)
    environment: OpenEnvSpec
    reset: dict[str, Any]


class StepRequest(ResetRequest):
    recorded: Recorded
    text: str
    turn: int = Field(ge=1)


class CloseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workflow_id: str = Field(min_length=1)


def check_openenv_version() -> str:
    version = importlib.metadata.version("openenv-core")
    if not version.startswith(SUPPORTED_OPENENV):
        raise fail(
            BAD_ENVIRONMENT,
            f"openenv-core {version} is installed; the environment worker speaks openenv-core {SUPPORTED_OPENENV}x"
            " (workers/environments/pyproject.toml)",
        )
    return version


def parse_action(text: str, spec: OpenEnvSpec) -> tuple[dict[str, Any] | None, str]:
    """The action a model turn asks for, or None and why. Text mode: the turn's text is the value of
    `text_field`. Tool mode: the last `<tool_call>{"name": "step", "arguments": {...}}` block (closed
    or cut by the stop string), its arguments the action."""
    if spec.action == "text":
        return {spec.text_field: text.strip()}, ""
    calls = TOOL_CALL.findall(text)
    if not calls:
        return None, "the turn has no tool call"
    try:
        call = json.loads(calls[-1].strip())
    except json.JSONDecodeError as err:
        return None, f"invalid JSON in the tool call ({err.msg})"
    if isinstance(call, dict) and isinstance(call.get("function"), dict):
        call = call["function"]
    if not isinstance(call, dict) or call.get("name") != STEP_TOOL:
        return None, f"the tool call is not a call of {STEP_TOOL}"
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as err:
            return None, f"invalid JSON in the tool call's arguments ({err.msg})"
    if not isinstance(args, dict):
        return None, "the tool call's arguments are not an object"
    return args, ""


def no_action_feedback(why: str) -> str:
    return f'No action: {why}. Act with the {STEP_TOOL} tool: <tool_call>{{"name": "{STEP_TOOL}", "arguments": {{...}}}}</tool_call>'


def observation_text(answer: Answer, spec: OpenEnvSpec, what: str) -> str:
    """What the model reads: the observation's `observation_field`, else the observation as JSON."""
    if answer.refused is not None:
        return f"The environment refused the action: {answer.refused}"
    if not spec.observation_field:
        return json.dumps(answer.observation, ensure_ascii=False, sort_keys=True)
    value = answer.observation.get(spec.observation_field)
    if not isinstance(value, str):
        raise fail(
            ENVIRONMENT_FAILED,
            f"the observation of {what} has no string field {spec.observation_field!r}"
            f" (python_env.openenv.observation_field; its fields: {', '.join(sorted(answer.observation)) or 'none'})",
        )
    return value


@dataclass
class Session:
    client: Client
    url: str
    """The server's HTTP address."""
    where: str
    """The server as failures name it (its URL, and the app for a local one)."""
    server: LocalServer | None
    server_start: int
    sent: int = 0
    used: float = field(default_factory=time.monotonic)

    def live(self) -> bool:
        local_ok = self.server is None or (self.server.alive() and self.server.starts == self.server_start)
        return local_ok and self.client.is_open()


class OpenEnvEnvironments:
    """The OpenEnv sessions this worker process holds, by episode workflow id, and its local servers."""

    def __init__(self, own_queue: str, heartbeat_s: float = 2.0) -> None:
        self.own_queue = own_queue
        self.heartbeat_s = heartbeat_s
        self.sessions: dict[str, Session] = {}
        self.servers: dict[str, LocalServer] = {}
        self.action_schemas: dict[str, dict] = {}

    # --- sessions ---------------------------------------------------------------------------------

    async def open(self, wid: str, spec: OpenEnvSpec, reset: dict[str, Any]) -> tuple[Session, Answer]:
        """A fresh session for the episode, reset."""
        await self.drop(wid)
        server = None
        if spec.app:
            server = self.servers.setdefault(spec.app, LocalServer(spec.app))
            url = await server.ensure()
        else:
            url = spec.url
        where = spec.url or f"{url} (app {spec.app})"
        client = (await client_class())(
            base_url=url,
            connect_timeout_s=spec.step_timeout_s,
            message_timeout_s=spec.step_timeout_s,
            max_message_size_mb=MAX_ANSWER_BYTES / 2**20,
        )
        await guarded(where, "the connection", client.connect(), spec.step_timeout_s)
        session = Session(client, url, where, server, server.starts if server else 0)
        self.sessions[wid] = session
        result = await guarded(where, "reset", client.reset(**reset), spec.step_timeout_s)
        return session, answer_of(result, "reset", where)

    async def drop(self, wid: str) -> None:
        session = self.sessions.pop(wid, None)
        if session is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.client.disconnect(), 5)

    async def reap_idle(self) -> None:
        now = time.monotonic()
        for wid in [w for w, s in self.sessions.items() if now - s.used > SESSION_IDLE_S]:
            log.info("closing the idle OpenEnv session of %s", wid)
            await self.drop(wid)

    async def rebuild(self, req: StepRequest) -> Session:
        """A fresh session replayed to where the history is: reset, then each recorded action, each
        answer checked against the recorded one."""
        session, first = await self.open(req.workflow_id, req.environment, req.reset)
        if first.digest != req.recorded.reset:
            await self.drop(req.workflow_id)
            raise fail(
                DIVERGED,
                "diverged at reset: the rebuilt OpenEnv environment's first observation"
                f" {observation_text(first, req.environment, 'reset')[:200]!r} is not the recorded one"
                " (an environment must answer the same seed and actions the same way to be rebuilt)",
            )
        for k, rec in enumerate(req.recorded.steps, start=1):
            answer = await step_answer(
                session.client, rec.action, f"step {k} (replayed)", session.where, req.environment.step_timeout_s
            )
            session.sent += 1
            if answer.digest != rec.digest:
                await self.drop(req.workflow_id)
                raise fail(
                    DIVERGED,
                    f"diverged at step {k}: the rebuilt OpenEnv environment answered the recorded action"
                    f" {json.dumps(rec.action)[:200]} with {observation_text(answer, req.environment, f'step {k}')[:200]!r},"
                    " not the recorded observation",
                )
        log.info("rebuilt the OpenEnv session of %s: reset and %d actions replayed", req.workflow_id, session.sent)
        return session

    async def state(self, session: Session, spec: OpenEnvSpec) -> Any:
        """The server's state when it is JSON and small, else None (it is kept for the record only)."""
        try:
            state = await guarded(session.where, "state", session.client.state(), spec.step_timeout_s)
        except Exception as err:  # noqa: BLE001 - a state that cannot be read is not recorded; replay is the rebuild
            log.info("the OpenEnv state of %s is not recorded: %s", session.where, err)
            return None
        return state if len(json.dumps(state, default=str)) <= MAX_STATE_BYTES else None

    async def action_schema(self, spec: OpenEnvSpec, session: Session) -> dict:
        """The environment's action schema (GET /schema), read once per server."""
        if spec.key not in self.action_schemas:
            where = session.where
            try:
                async with httpx.AsyncClient(timeout=spec.step_timeout_s) as http:
                    res = await http.get(f"{http_url(session.url)}/schema")
                schema = res.json() if res.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as err:
                raise fail(
                    BAD_ENVIRONMENT, f"the OpenEnv server at {where}: GET /schema: {type(err).__name__}: {err}"
                ) from None
            action = schema.get("action") if isinstance(schema, dict) else None
            if not isinstance(action, dict) or not isinstance(action.get("properties"), dict):
                raise fail(
                    BAD_ENVIRONMENT,
                    f"the OpenEnv server at {where} answered GET /schema with HTTP {res.status_code} and no action schema:"
                    " not an OpenEnv 0.3 server",
                )
            self.action_schemas[spec.key] = action
        return self.action_schemas[spec.key]

    async def step_tools(self, spec: OpenEnvSpec, session: Session) -> list[dict]:
        """Tool mode: the `step` tool, its parameters the environment's action schema. Text mode: none,
        and text_field checked to be one of the action's fields."""
        action = await self.action_schema(spec, session)
        props = {k: v for k, v in action["properties"].items() if k != "metadata"}
        if spec.action == "text":
            if spec.text_field not in props:
                raise fail(
                    BAD_ENVIRONMENT,
                    f"python_env.openenv.text_field {spec.text_field!r} is not a field of the environment's action"
                    f" (its fields: {', '.join(props) or 'none'})",
                )
            return []
        params = {**action, "properties": props, "required": [r for r in action.get("required", []) if r != "metadata"]}
        params.pop("title", None)
        description = action.get("description") or "Act in the environment."
        return [{"type": "function", "function": {"name": STEP_TOOL, "description": description, "parameters": params}}]

    async def close(self) -> None:
        for wid in list(self.sessions):
            await self.drop(wid)
        for server in self.servers.values():
            await server.stop()

    # --- activities -------------------------------------------------------------------------------

    @activity.defn(name="openenvReset")
    async def reset(self, raw: dict) -> dict:
        req = _parse(ResetRequest, raw, "openenvReset")
        version = check_openenv_version()
        await self.reap_idle()
        async with self._heartbeat(), self._dropped_on_failure(req.workflow_id):
            session, answer = await self.open(req.workflow_id, req.environment, req.reset)
            tools = await self.step_tools(req.environment, session)
            state = await self.state(session, req.environment)
            result = self._result(answer, req.environment, "reset", state, "reset")
        return {**result, "tools": tools, "openenv_version": version}

    @activity.defn(name="openenvStep")
    async def step(self, raw: dict) -> dict:
        req = _parse(StepRequest, raw, "openenvStep")
        spec = req.environment
        action, why = parse_action(req.text, spec)
        if action is None:  # nothing goes to the environment: the model is told how to act
            return {
                "observation": no_action_feedback(why),
                "reward": None,
                "done": False,
                "digest": None,
                "state": None,
                "action": None,
                "reason": f"no_action: {why}",
                "replayed": 0,
                "session_queue": self.own_queue,
            }
        await self.reap_idle()
        n = len(req.recorded.steps) + 1
        # A step that fails leaves the session where no record says (a hung step may still land): the
        # next attempt rebuilds it.
        async with self._heartbeat(), self._dropped_on_failure(req.workflow_id):
            session = self.sessions.get(req.workflow_id)
            replayed = 0
            if session is None or session.sent != n - 1 or not session.live():
                session = await self.rebuild(req)
                replayed = session.sent
            session.used = time.monotonic()
            answer = await step_answer(session.client, action, f"step {n}", session.where, spec.step_timeout_s)
            session.sent += 1
            state = None if answer.refused is not None else await self.state(session, spec)
            reason = "refused" if answer.refused is not None else ("done" if answer.done else "stepped")
            result = {**self._result(answer, spec, f"step {n}", state, reason), "action": action, "replayed": replayed}
        if answer.done:
            await self.drop(req.workflow_id)
        return result

    @activity.defn(name="openenvClose")
    async def close_session(self, raw: dict) -> None:
        req = _parse(CloseRequest, raw, "openenvClose")
        await self.drop(req.workflow_id)

    def _result(self, answer: Answer, spec: OpenEnvSpec, what: str, state: Any, reason: str) -> dict:
        return {
            "observation": observation_text(answer, spec, what),
            "reward": answer.reward,
            "done": answer.done,
            "digest": answer.digest,
            "state": state,
            "reason": reason,
            "session_queue": self.own_queue,
        }

    @contextlib.asynccontextmanager
    async def _dropped_on_failure(self, wid: str):
        try:
            yield
        except BaseException:
            await self.drop(wid)
            raise

    @contextlib.asynccontextmanager
    async def _heartbeat(self):
        async def beat() -> None:
            while True:
                activity.heartbeat()
                await asyncio.sleep(self.heartbeat_s)

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()


def _parse(model: type[BaseModel], raw: dict, name: str) -> Any:
    try:
        return model.model_validate(raw)
    except Exception as err:  # noqa: BLE001
        raise fail(BAD_ENVIRONMENT, f"{name}: {err}") from None
