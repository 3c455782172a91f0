"""One OpenEnv session (openenv-core 0.3): its client, and each way a server can fail named.

OpenEnv 0.3 serves a stateful session per WebSocket at `/ws` (messages `reset`, `step`, `state`,
`close`; its HTTP `/reset` and `/step` make a fresh environment per request, so they cannot play an
episode). The client is openenv's own `GenericEnvClient` (actions and observations as plain JSON,
no environment package needed on this side), with its answers read strictly: an answer that is not
JSON, an error with its code, a message over the size bound, each raised as a failure that names the
server and what was asked. Whether a failure is retried is the episode workflow's retry policy:
these are retryable (a server that comes back, a session rebuilt by replay) unless `fail()` made
them final."""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import math
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio.exceptions import ApplicationError
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.protocol import State

from .errors import BAD_ENVIRONMENT, ENVIRONMENT_FAILED, fail

MAX_ANSWER_BYTES = 1_000_000
"""The most one answer of the server may be (an observation goes into the episode's history)."""

UNREACHABLE = "EnvironmentUnreachable"
TIMEOUT = "EnvironmentTimeout"
LOST = "EnvironmentLost"
BUSY = "EnvironmentBusy"
T = TypeVar("T")


class ServerError(Exception):
    """The server answered with an error message (WSErrorResponse)."""

    def __init__(self, code: str, message: str, errors: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.errors = errors


class NotJson(Exception):
    pass


class Refused(Exception):
    """The server refused an action as invalid for its action type (its validation errors)."""


def retryable(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=False)


class CheckedAnswers:
    """What tempo-rl changes in openenv's generic client: its answers checked (JSON objects, errors
    with their codes). Mixed into GenericEnvClient by `client_class`."""

    # GenericEnvClient's: its connection, its answer timeout, its _send.
    _ws: Any
    _message_timeout: float
    _send: Any

    async def _receive(self) -> dict[str, Any]:
        assert self._ws is not None
        raw = await asyncio.wait_for(self._ws.recv(), timeout=self._message_timeout)
        try:
            message = json.loads(raw)
        except ValueError:
            raise NotJson(str(raw[:200])) from None
        if not isinstance(message, dict):
            raise NotJson(f"a JSON {type(message).__name__}, not an object")
        return message

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        await self._send(message)
        answer = await self._receive()
        if answer.get("type") == "error":
            data = answer.get("data") if isinstance(answer.get("data"), dict) else {}
            raise ServerError(str(data.get("code", "UNKNOWN")), str(data.get("message", "")), data.get("errors"))
        return answer

    def is_open(self) -> bool:
        return self._ws is not None and self._ws.state is State.OPEN


Client = Any
_client: type | None = None


async def client_class() -> type:
    """openenv's GenericEnvClient with CheckedAnswers. openenv.core imports gradio and fastmcp (seconds
    of CPU): loaded on the first OpenEnv episode, in a thread (the worker's heartbeats go on), so a
    worker that serves only verifiers never pays for it."""
    global _client
    if _client is None:
        module = await asyncio.to_thread(importlib.import_module, "openenv.core.generic_client")
        _client = type("Client", (CheckedAnswers, module.GenericEnvClient), {})
    return _client


@dataclass
class Answer:
    """The server's answer to a reset or a step: an observation, or the action refused."""

    observation: dict[str, Any]
    reward: float | None
    done: bool
    refused: str | None = None

    @property
    def digest(self) -> str:
        """What a replayed answer must match: the observation, reward and done (or the refusal)."""
        what = (
            {"refused": self.refused}
            if self.refused is not None
            else {"observation": self.observation, "reward": self.reward, "done": self.done}
        )
        return hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def answer_of(result: Any, what: str, where: str) -> Answer:
    """A StepResult of the client → an Answer, or a failure naming what the server sent."""
    obs, reward, done = result.observation, result.reward, result.done
    if not isinstance(obs, dict):
        raise fail(
            ENVIRONMENT_FAILED,
            f"the OpenEnv server at {where} answered {what} with a {type(obs).__name__}, not an observation object",
        )
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward)
    ):
        raise fail(
            ENVIRONMENT_FAILED,
            f"the OpenEnv server at {where} answered {what} with reward {reward!r}, not a finite number",
        )
    if not isinstance(done, bool):
        raise fail(
            ENVIRONMENT_FAILED, f"the OpenEnv server at {where} answered {what} with done {done!r}, not a boolean"
        )
    return Answer(obs, None if reward is None else float(reward), done)


def _validation_errors(err: ServerError) -> str:
    fields = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg', '')}"
        for e in (err.errors or [])
        if isinstance(e, dict)
    )
    return fields or err.message


def _close_code(err: ConnectionClosed) -> int | None:
    return (err.rcvd or err.sent).code if (err.rcvd or err.sent) else None


async def guarded(where: str, what: str, call: Awaitable[T], timeout_s: float, refusable: bool = False) -> T:
    """Runs one exchange with the server at `where`; each way it can fail becomes a failure naming it
    (`refusable`: an action the server's validation refused raises Refused, the model's doing)."""
    try:
        return await call
    except ServerError as err:
        if refusable and err.code == "VALIDATION_ERROR":
            raise Refused(_validation_errors(err)) from None
        if err.code == "CAPACITY_REACHED":
            raise retryable(
                BUSY, f"the OpenEnv server at {where} is at its session limit ({what}): {err.message}"
            ) from None
        detail = f"{err.message}: {json.dumps(err.errors, default=str)[:500]}" if err.errors else err.message
        raise fail(
            ENVIRONMENT_FAILED, f"the OpenEnv environment at {where} failed {what} ({err.code}): {detail}"
        ) from None
    except NotJson as err:
        raise fail(
            ENVIRONMENT_FAILED, f"the OpenEnv server at {where} answered {what} with something that is not JSON: {err}"
        ) from None
    except TimeoutError:
        raise retryable(
            TIMEOUT, f"the OpenEnv server at {where} did not answer {what} within {timeout_s:g} s"
        ) from None
    except ConnectionClosed as err:
        if _close_code(err) == 1009:
            raise fail(
                ENVIRONMENT_FAILED,
                f"the OpenEnv server's answer to {what} is over {MAX_ANSWER_BYTES} bytes (at {where}); an observation goes"
                " into the episode's history, so it is bounded",
            ) from None
        raise retryable(LOST, f"the OpenEnv server at {where} closed the session during {what} ({err})") from None
    except ConnectionError as err:
        cause = err.__cause__
        if isinstance(cause, InvalidStatus):
            raise fail(
                BAD_ENVIRONMENT,
                f"{where} answered HTTP {cause.response.status_code} at /ws: not an OpenEnv 0.3 server (0.3 plays a session"
                " over a WebSocket at /ws; the environment worker speaks openenv-core 0.3)",
            ) from None
        raise retryable(UNREACHABLE, f"cannot reach the OpenEnv server at {where}: {cause or err}") from None
    except OSError as err:
        raise retryable(UNREACHABLE, f"cannot reach the OpenEnv server at {where}: {err}") from None


async def step_answer(client: Client, action: dict, what: str, where: str, timeout_s: float) -> Answer:
    """Sends one action; a refusal of the action itself (the server's validation) is an answer, not a failure."""
    try:
        result = await guarded(where, what, client.step(action), timeout_s, refusable=True)
    except Refused as refused:
        return Answer({}, None, False, refused=str(refused))
    return answer_of(result, what, where)


def http_url(url: str) -> str:
    """The server's HTTP address for a URL given as http(s):// or ws(s)://."""
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(ws):
            return http + url[len(ws) :]
    return url.rstrip("/")
