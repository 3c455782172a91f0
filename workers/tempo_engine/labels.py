"""Weight-version labels for vLLM releases that have none (compat.py adds this ASGI middleware).

tempo-rl labels every engine with the version of the weights it serves and checks the label on every
generated turn: a turn sampled by other weights than its episode's is generated again elsewhere
(activities/generate.ts). vLLM 0.32 has the label itself (POST /update_weight_version, GET
/weight_info, `weight_versions` spans on each generate choice); vLLM 0.26 has none. This middleware
serves the same routes and stamps the same field, keeping the label in the API server process:

- POST /update_weight_version {"new_version": V}  → {"success": true, "new_version": V}
- GET /weight_info                                → {"weight_version": V} ("default" before any label)
- POST /inference/v1/generate                     each choice gets weight_versions = [{version, start: 0,
  end: its token count}], the label when the request started if it is still the label when the answer
  is sent, else "mixed" (a sync relabelled the engine meanwhile: the tokens may come from two versions,
  which tempo-rl reads as unknown, as it reads 0.32's disagreeing spans).

A weight sync relabels an engine while it is paused (trainer/weights/sync.py), so a request that started
and ended under one label ran under one set of weights. One label per API server process: compat.py
refuses this middleware with more than one (--api-server-count)."""

from __future__ import annotations

import json

LABEL_ROUTES = ("/update_weight_version", "/weight_info")
GENERATE = "/inference/v1/generate"


async def _read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _send_json(send, status: int, doc) -> None:
    payload = json.dumps(doc).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def stamp(doc: dict, version: str) -> dict:
    """`doc` (a generate answer) with weight_versions on every choice that has none."""
    for choice in doc.get("choices") or []:
        if isinstance(choice, dict) and not choice.get("weight_versions"):
            choice["weight_versions"] = [{"version": version, "start": 0, "end": len(choice.get("token_ids") or [])}]
    return doc


class WeightLabels:
    def __init__(self, app):
        self.app = app
        self.label = "default"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope.get("path", ""), scope.get("method", "")
        if path == "/update_weight_version" and method == "POST":
            return await self._relabel(receive, send)
        if path == "/weight_info" and method == "GET":
            return await _send_json(send, 200, {"weight_version": self.label})
        if path == GENERATE and method == "POST":
            return await self._generate(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _relabel(self, receive, send) -> None:
        try:
            version = json.loads(await _read_body(receive))["new_version"]
        except (ValueError, KeyError, TypeError):
            return await _send_json(send, 400, {"error": 'expected {"new_version": "<label>"}'})
        if not isinstance(version, str) or not version:
            return await _send_json(send, 400, {"error": f"new_version must be a non-empty string, got {version!r}"})
        self.label = version
        await _send_json(send, 200, {"success": True, "new_version": version})

    async def _generate(self, scope, receive, send) -> None:
        started = self.label
        held: dict = {}
        chunks: list[bytes] = []

        async def capture(message):
            if message["type"] == "http.response.start" and _is_json(message):
                held["start"] = message  # held until the body is whole: its length may change
                return
            if message["type"] == "http.response.body" and "start" in held:
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    await self._answer(send, held["start"], b"".join(chunks), started)
                return
            await send(message)  # a stream, an error page: passed on as it comes

        await self.app(scope, receive, capture)

    async def _answer(self, send, start: dict, body: bytes, started: str) -> None:
        headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
        if start.get("status") == 200:
            try:
                body = json.dumps(stamp(json.loads(body), started if self.label == started else "mixed")).encode()
            except (ValueError, AttributeError):
                pass  # not the answer we know: passed on as it came
        await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _is_json(start: dict) -> bool:
    return any(
        k.lower() == b"content-type" and v.startswith(b"application/json") for k, v in start.get("headers") or []
    )
