"""Weight sync moves all engines together: every engine paused before any reload, every reload done
before any resume; an engine whose reload fails is labelled unusable (never the new version, nor its
old one over half-loaded weights) and resumed; an engine on a newer version is left alone. Engines
here are small HTTP servers speaking vLLM's routes (the live engine's reload is in test_parity.py)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import pytest

from trainer.contract import SyncWeightsInput
from trainer.weights.sync import UNUSABLE, sync_weights_from_disk

CALLS: list[tuple[str, str]] = []  # (engine name, route), in the order the engines saw them
LOCK = threading.Lock()


class FakeEngine:
    def __init__(self, name: str, version: str = "0", fail_reload: bool = False):
        self.name, self.version, self.fail_reload, self.paused = name, version, fail_reload, False
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer(200, {"weight_version": engine.version})

            def do_POST(self):
                route = urlparse(self.path).path
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with LOCK:
                    CALLS.append((engine.name, route))
                if route == "/collective_rpc" and engine.fail_reload:
                    return self._answer(500, {"error": "reload failed half-way"})
                if route == "/update_weight_version":
                    engine.version = body["new_version"]
                engine.paused = {"/pause": True, "/resume": False}.get(route, engine.paused)
                self._answer(200, {"success": True} if route == "/reset_prefix_cache" else {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def engines():
    CALLS.clear()
    made: list[FakeEngine] = []
    yield lambda *args, **kw: made.append(FakeEngine(*args, **kw)) or made[-1]
    for e in made:
        e.server.shutdown()
        e.server.server_close()


def sync(version: int, *engines: FakeEngine, run_id: str = "r"):
    return sync_weights_from_disk(
        SyncWeightsInput(
            run_id=run_id,
            weight_version=version,
            checkpoint="/ckpt",
            engines=[e.url for e in engines],
            pause_mode="wait",
        )
    )


def first(route: str) -> int:
    return min(i for i, (_, r) in enumerate(CALLS) if r == route)


def last(route: str) -> int:
    return max(i for i, (_, r) in enumerate(CALLS) if r == route)


def test_all_engines_are_paused_before_any_reload_and_reloaded_before_any_resume(engines):
    a, b = engines("a"), engines("b")
    out = sync(3, a, b)
    assert [e.ok for e in out.engines] == [True, True] and a.version == b.version == "3"
    assert last("/pause") < first("/collective_rpc") and last("/collective_rpc") < first("/resume"), CALLS
    assert not a.paused and not b.paused


def test_an_engine_whose_reload_fails_is_labelled_unusable_and_resumed(engines):
    a, b = engines("a"), engines("b", fail_reload=True)
    out = sync(3, a, b)
    assert [e.ok for e in out.engines] == [True, False]
    assert "reload failed half-way" in out.engines[1].error
    assert a.version == "3" and b.version == UNUSABLE, "a half-loaded engine never keeps a version label"
    assert not b.paused, "never left paused"
    assert ("b", "/reset_prefix_cache") not in CALLS


def test_a_sync_never_takes_an_engine_backwards_within_a_run(engines):
    a, b = engines("a"), engines("b")
    sync(7, a, run_id="late")
    CALLS.clear()
    out = sync(5, a, b, run_id="late")  # a stale attempt of version 5 arriving after version 7
    assert [e.ok for e in out.engines] == [True, True]
    assert a.version == "7" and b.version == "5"
    assert not any(name == "a" for name, _ in CALLS), "the newer engine was not touched"
    assert "newer" in out.engines[0].error
    assert sync(0, a, run_id="next").engines[0].ok and a.version == "0", "another run numbers its own versions"


def test_a_dead_engine_fails_its_sync_and_the_others_move_on(engines):
    a = engines("a")
    dead = SyncWeightsInput(
        run_id="r", weight_version=2, checkpoint="/ckpt", engines=[a.url, "http://127.0.0.1:9"], pause_mode="wait"
    )
    out = sync_weights_from_disk(dead)
    assert [e.ok for e in out.engines] == [True, False] and a.version == "2"
