"""The durable model gateway: a verifiers v1 model client whose every call is a recorded step of the
episode workflow.

A verifiers harness owns its turn loop and calls a model through verifiers' interception server,
which hands each call to a `Client`. This one sends the episode workflow an Update, `modelCall`,
numbered by call: the workflow renders the new messages and generates through tempo-rl's engines
(token-exact, as for a TypeScript environment) and answers with the completion, or — for a call
it has already answered, when the activity is retried after a crash — with the recorded
completion, provided the request is the one it recorded (same digest); otherwise the episode fails
as diverged at that call. So a harness rerun from the start after its worker died gets the
recorded responses back until it reaches calls not yet made.

The workflow keeps one token sequence per episode, so each call must extend the last one: the
earlier messages unchanged, the completion served last time as the assistant turn, then the new
messages (tool results, user turns). A harness that rewrites or compacts its history is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from verifiers.v1.clients import Client, TrainClientConfig
from verifiers.v1.clients.train import serialize_completion, tool_to_wire
from verifiers.v1.dialects import ChatDialect, Dialect
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.errors import ProviderError
from verifiers.v1.types import AssistantMessage, Response, SamplingConfig, ToolCall, Usage

from .errors import DIVERGED, ENVIRONMENT_FAILED

MODEL_CALL_UPDATE = "modelCall"
"""The episode workflow's update (protocol/episode.ts modelCallUpdate)."""

MAX_CALL_BYTES = 1_000_000
"""The most a model call may add to the history (its new messages, as JSON): the rest of a
Temporal payload's 2 MB is the workflow's own."""

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class GatewayClientConfig(TrainClientConfig):
    """Selects the gateway for one episode. A train config, so the interception server asks it for
    whole responses (it frames them as a stream itself) instead of relaying provider bytes."""

    workflow_id: str = ""
    api_key_var: str = "TEMPO_RL_GATEWAY_KEY"  # not Prime's: no Prime config is read
    base_url: str = "http://tempo-rl-gateway.invalid/v1"


def digest(messages: list[dict], tools: list[dict]) -> str:
    """What identifies a request: its messages and tools, canonical JSON, SHA-256."""
    canonical = json.dumps({"messages": messages, "tools": tools}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_tool_calls(text: str, call: int) -> tuple[str, list[ToolCall] | None]:
    """Hermes-style <tool_call>{"name": …, "arguments": …}</tool_call> blocks (the chat template's own
    format) → the text before the first block and the calls; an unparseable block stays text."""
    calls: list[ToolCall] = []
    for i, body in enumerate(TOOL_CALL.findall(text)):
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError:
            continue
        if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
            continue
        args = parsed.get("arguments", {})
        calls.append(
            ToolCall(
                id=f"call_{call}_{i}",
                name=parsed["name"],
                arguments=args if isinstance(args, str) else json.dumps(args),
            )
        )
    if not calls:
        return text, None
    return text[: text.find("<tool_call>")].rstrip(), calls


def _same_assistant(sent: Mapping[str, Any], served: Mapping[str, Any]) -> bool:
    """The assistant turn the harness sends back is the one served (content and tool calls; a
    harness may drop empty content or reasoning, which the tokens never depended on)."""

    def calls(m: Mapping[str, Any]) -> list[tuple[str, Any]]:
        out = []
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, json.JSONDecodeError):
                args = fn.get("arguments")
            out.append((fn.get("name"), args))
        return out

    return (
        sent.get("role") == "assistant"
        and (sent.get("content") or "") == (served.get("content") or "")
        and calls(sent) == calls(served)
    )


@dataclass
class ModelGateway:
    """One episode's model calls, as this attempt of the activity has made them."""

    handle: WorkflowHandle
    calls: int = 0
    conversation: list[dict] = field(default_factory=list)
    fatal: tuple[str, str] | None = None
    """(failure type, message) that ends the episode whatever the environment makes of it."""

    def _tail(self, messages: list[dict]) -> list[dict]:
        if self.calls == 0:
            return messages
        prefix = self.conversation[:-1]
        served = self.conversation[-1]
        for i, m in enumerate(prefix):
            if i >= len(messages) or messages[i] != m:
                return self._refuse(f"message {i} of the conversation is not the one sent at call {self.calls - 1}")
        if len(messages) <= len(prefix) or not _same_assistant(messages[len(prefix)], served):
            return self._refuse(f"message {len(prefix)} is not the assistant turn served at call {self.calls - 1}")
        return messages[len(prefix) + 1 :]

    def _refuse(self, what: str) -> list[dict]:
        message = (
            f"model call {self.calls}: {what}; a tempo-rl episode is one token sequence, so each call must"
            " extend the last (a harness that rewrites or compacts its history cannot be trained token-exact)"
        )
        self.fatal = (DIVERGED, message)
        raise ProviderError(message, status_code=400)

    async def complete(self, messages: list[dict], tools: list[dict]) -> dict:
        """One model call through the episode workflow; its answer {text, finish_reason, prompt_tokens,
        completion_tokens}."""
        tail = self._tail(messages)
        size = len(json.dumps(tail)) + (len(json.dumps(tools)) if self.calls == 0 else 0)
        if size > MAX_CALL_BYTES:
            message = (
                f"model call {self.calls}: the environment's messages are {size} bytes; at most {MAX_CALL_BYTES}"
                " go into the episode's history a call"
            )
            self.fatal = (ENVIRONMENT_FAILED, message)
            raise ProviderError(message, status_code=400)
        request = {
            "call": self.calls,
            "digest": digest(messages, tools),
            "messages": tail,
            "tools": tools if self.calls == 0 else [],
        }
        try:
            result = await self.handle.execute_update(MODEL_CALL_UPDATE, request)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == DIVERGED:
                self.fatal = (DIVERGED, cause.message)
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            raise ProviderError(f"model call {self.calls}: {message}", status_code=400) from err
        self.conversation = [*messages, {}]  # the served turn: set by the client
        self.calls += 1
        return result


GATEWAYS: dict[str, ModelGateway] = {}
"""The live gateways of this process, by episode workflow id (an episode's config names its own)."""


class GatewayClient(Client):
    def __init__(self, config: GatewayClientConfig) -> None:
        self.config = config

    async def get_response(
        self,
        dialect: Dialect,
        body: dict,
        sampling: SamplingConfig,
        session_id: str | None = None,
        turn=None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        if not isinstance(dialect, ChatDialect):
            raise ProviderError(
                f"the tempo-rl gateway speaks chat completions only, not {type(dialect).__name__}", status_code=400
            )
        gateway = GATEWAYS.get(self.config.workflow_id)
        if gateway is None:
            raise ProviderError(f"no live episode {self.config.workflow_id!r} in this worker", status_code=400)
        request = dialect.parse_request(body)
        messages = [message_to_wire(m) for m in request.messages]
        tools = [tool_to_wire(t) for t in request.tools or []]
        call = gateway.calls
        result = await gateway.complete(messages, tools)
        content, tool_calls = parse_tool_calls(result["text"], call) if tools else (result["text"], None)
        finish = result["finish_reason"] if result["finish_reason"] in ("stop", "length") else "stop"
        response = Response(
            id=f"tempo-rl-{call}",
            created=0,
            model=body.get("model") or "tempo-rl",
            message=AssistantMessage(content=content, tool_calls=tool_calls),
            finish_reason="tool_calls" if tool_calls else finish,
            usage=Usage(prompt_tokens=result["prompt_tokens"], completion_tokens=result["completion_tokens"]),
        )
        response.raw = serialize_completion(response, response.model)
        # What the harness will send back as this turn: the next call is checked against it.
        gateway.conversation[-1] = message_to_wire(response.message)
        return response


def install() -> None:
    """Makes verifiers' interception server build a GatewayClient for a GatewayClientConfig (it
    builds one client per distinct config; every other config keeps verifiers' own)."""
    from verifiers.v1.interception import server

    original = server.resolve_client
    if getattr(original, "_tempo_rl", False):
        return

    def resolve(config):
        return GatewayClient(config) if isinstance(config, GatewayClientConfig) else original(config)

    resolve._tempo_rl = True  # type: ignore[attr-defined]
    server.resolve_client = resolve
