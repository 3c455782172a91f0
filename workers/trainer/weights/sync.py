"""Weight sync: new weights from the trainer into every engine, then the engines report the new version.

All engines move together, in phases (sync_weights_phased): [wake their weights] → pause all → label
them "loading" → load all (one transport) → reset the prefix and vision-encoder caches and label the
new version on those that loaded → [wake their KV caches] → resume all → read the labels back. An
engine that failed any phase is labelled "unusable" (the rollout side retries its tokens elsewhere)
and retried at the next sync; the activity fails (retryably) only when no engine took the version. A
version never goes backwards: an engine that already serves a newer one (a stale retry arriving late)
is left alone. The "loading" label covers a trainer that dies mid-load: the engine stays paused and
unlabelled until the retried sync loads every weight again.

Transports (`SyncWeightsInput.transport`, engines.weight_transport), vLLM's dev-mode routes
(VLLM_SERVER_DEV_MODE=1; docs/engines.md):

- disk: POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}: every
  worker reloads the checkpoint's model directory in place. With a remote blob store (s3://) the
  engines share no filesystem with the trainer and pull the checkpoint themselves instead
  ({"method": "tempo_rl_reload_from_store", ...}, tempo_engine/weights_from_store.py).
- ipc: the trainer's in-memory weights in buckets through shared memory (ipc.py): CUDA IPC
  on the GPU(s) it shares with the engines, /dev/shm on CPU.

Colocated engines (engines.colocate) sleep while the trainer trains (`sleep_engines`, called by the
train_step activity) and wake inside the sync: their weights before the load, their KV cache after it,
once the trainer has handed its cached GPU memory back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import requests

from ..stores.checkpoints import is_location, store_and_key
from ..contract import EngineSyncResult, SyncWeightsInput, SyncWeightsOutput


class EngineSyncError(RuntimeError):
    pass


class EngineClient:
    def __init__(self, url: str, timeout: float = 600.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, **kwargs):
        resp = requests.request(method, f"{self.url}{path}", timeout=self.timeout, **kwargs)
        if resp.status_code >= 400:
            raise EngineSyncError(f"{method} {self.url}{path} → {resp.status_code}: {resp.text[:500]}")
        try:
            return resp.json()
        except ValueError:
            return None

    def pause(self, mode: str) -> None:
        self._call("POST", "/pause", params={"mode": mode})

    def resume(self) -> None:
        self._call("POST", "/resume")

    def rpc(self, method: str, **kwargs: str) -> list:
        """POST /collective_rpc: `method` on every worker of the engine (kwargs are strings: JSON if need
        be); their results."""
        return (self._call("POST", "/collective_rpc", json={"method": method, "kwargs": kwargs}) or {}).get(
            "results", []
        )

    def reload_weights(self, weights_path: str) -> None:
        """`weights_path`: a model directory on the engine's host, or a store location (stores/checkpoints.py)
        that the engine pulls from the store itself (tempo_engine/weights_from_store.py)."""
        if is_location(weights_path):
            store, key = store_and_key(weights_path)
            self.rpc("tempo_rl_reload_from_store", store=store, key=key)
            return
        self._call(
            "POST", "/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": weights_path}}
        )

    def reset_prefix_cache(self, attempts: int = 20, delay_s: float = 0.25) -> None:
        for _ in range(attempts):
            out = self._call("POST", "/reset_prefix_cache")
            if out is None or out.get("success", True):
                return
            time.sleep(delay_s)
        raise EngineSyncError(f"{self.url}: prefix cache still in use after {attempts} reset attempts")

    def reset_encoder_cache(self) -> None:
        """Drops the vision tower's cached outputs: they were computed by the old weights (vLLM reuses
        them for a later request showing the same image)."""
        self._call("POST", "/reset_encoder_cache")

    def set_weight_version(self, version: str) -> None:
        self._call("POST", "/update_weight_version", json={"new_version": version})

    def weights_digest(self) -> dict[str, str]:
        """The first worker's {parameter or buffer name: digest of its bits} (the worker extension's
        tempo_rl_weights_digest): whether two loads left the same weights."""
        return self.rpc("tempo_rl_weights_digest")[0]

    def weight_version(self) -> str | None:
        return (self._call("GET", "/weight_info") or {}).get("weight_version")

    def sleep(self, level: int) -> None:
        """Frees the engine's GPU memory (level 1: weights to host memory, KV cache dropped; level 2: both
        dropped) after aborting what it runs; it schedules nothing until woken."""
        self._call("POST", "/sleep", params={"level": str(level), "mode": "abort"})

    def wake_up(self, tags: list[str] | None = None) -> None:
        self._call("POST", "/wake_up", params=[("tags", t) for t in tags or []])

    def is_sleeping(self) -> bool:
        return bool((self._call("GET", "/is_sleeping") or {}).get("is_sleeping"))


class Loader(Protocol):
    """One transport's load phase: the new weights into the paused `clients`; their errors by url."""

    def load(self, clients: list[EngineClient], heartbeat: Callable[[dict], None]) -> dict[str, str]: ...


class DirectoryLoader:
    """disk: each engine reloads a model directory (or pulls a store location) itself."""

    def __init__(self, weights_path: str):
        self.weights_path = weights_path
        self.stats: dict[str, float] = {}

    def load(self, clients: list[EngineClient], heartbeat: Callable[[dict], None]) -> dict[str, str]:
        return each(clients, lambda c: c.reload_weights(self.weights_path))


# The label of an engine whose reload failed: not a number, so the rollout side reads its tokens as
# of an unknown version and retries them on another engine (activities/generate.ts).
UNUSABLE = "unusable"
# The label while weights load: a trainer that dies mid-load leaves an engine that no turn trusts.
LOADING = "loading"

# What this process last put on each engine, (run id, version): versions are numbered per run, so
# "never backwards" holds within a run. One sync at a time: a timed-out attempt that is still running
# and its retry never interleave their pause / reload / resume on one engine (a trainer that died
# cannot sync any more; its retry runs in the new process).
_SYNCED: dict[str, tuple[str, int]] = {}
_SYNC_LOCK = threading.Lock()


def each(clients: list[EngineClient], fn: Callable[[EngineClient], None]) -> dict[str, str]:
    """Runs fn on every engine at once; the errors by engine url."""

    def one(c: EngineClient) -> str | None:
        try:
            fn(c)
            return None
        except (EngineSyncError, requests.RequestException) as err:
            return str(err)

    if not clients:
        return {}
    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        return {c.url: e for c, e in zip(clients, pool.map(one, clients), strict=False) if e is not None}


def sleep_engines(urls: list[str], level: int) -> tuple[float, dict[str, str]]:
    """Puts colocated engines to sleep before the trainer trains (vLLM leaves one already asleep as it
    is); (seconds, errors by url). A failure is the next sync's to mend: training goes on."""
    t0 = time.perf_counter()
    clients = [EngineClient(u) for u in urls]
    errors = each(clients, lambda c: c.sleep(level))
    return time.perf_counter() - t0, errors


def sync_weights_phased(
    inp: SyncWeightsInput,
    loader: Loader,
    heartbeat: Callable[[dict], None] = lambda d: None,
    before_kv_wake: Callable[[], None] = lambda: None,
) -> SyncWeightsOutput:
    """Version V onto every engine, all or nothing per engine (the module docstring's phases). An engine
    that already has a newer version of the same run from this process is left alone: versions never
    go backwards. `before_kv_wake`: the trainer hands back memory before woken engines take it."""
    with _SYNC_LOCK:
        out = _sync_locked(inp, loader, heartbeat, before_kv_wake)
        for e in out.engines:
            if e.ok and e.error is None:
                _SYNCED[e.url] = (inp.run_id, inp.weight_version)
        return out


def _timed(timings: dict[str, float], key: str, fn: Callable[[], dict[str, str]]) -> dict[str, str]:
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0


def _sync_locked(
    inp: SyncWeightsInput, loader: Loader, heartbeat: Callable[[dict], None], before_kv_wake: Callable[[], None]
) -> SyncWeightsOutput:
    t0 = time.perf_counter()
    version = str(inp.weight_version)
    clients = [EngineClient(u) for u in inp.engines]
    newer = {
        c.url: v
        for c in clients
        if (r := _SYNCED.get(c.url)) and r[0] == inp.run_id and (v := r[1]) > inp.weight_version
    }
    targets = [c for c in clients if c.url not in newer]
    timings: dict[str, float] = {}
    errors: dict[str, str] = {}
    if inp.wake_engines:
        heartbeat({"phase": "waking", "engines": len(targets)})
        errors |= _timed(timings, "wake_seconds", lambda: each(targets, lambda c: c.wake_up(["weights"])))
    heartbeat({"phase": "pausing", "engines": len(targets)})
    errors |= each([c for c in targets if c.url not in errors], lambda c: c.pause(inp.pause_mode))
    paused = [c for c in targets if c.url not in errors]
    errors |= each(paused, lambda c: c.set_weight_version(LOADING))
    heartbeat({"phase": "reloading", "engines": len(paused)})
    errors |= _timed(
        timings, "load_seconds", lambda: loader.load([c for c in paused if c.url not in errors], heartbeat)
    )
    # in-flight requests (pause mode keep) still use their cached image features: only drop them otherwise
    caches = (
        (lambda c: c.reset_prefix_cache())
        if inp.pause_mode == "keep"
        else (lambda c: (c.reset_prefix_cache(), c.reset_encoder_cache()))
    )
    errors |= each([c for c in paused if c.url not in errors], lambda c: (caches(c), c.set_weight_version(version)))
    each([c for c in paused if c.url in errors], lambda c: c.set_weight_version(UNUSABLE))
    if inp.wake_engines:
        before_kv_wake()
        errors |= {
            url: f"wake failed: {e}"
            for url, e in _timed(
                timings, "wake_seconds", lambda: each(paused, lambda c: c.wake_up(["kv_cache"]))
            ).items()
            if url not in errors
        }
    heartbeat({"phase": "resuming", "engines": len(paused)})
    errors |= {url: f"resume failed: {e}" for url, e in each(paused, lambda c: c.resume()).items() if url not in errors}
    results = [_result(c, version, newer, errors, t0) for c in clients]
    timings["seconds"] = time.perf_counter() - t0
    return SyncWeightsOutput(
        weight_version=inp.weight_version, engines=results, timings={**timings, **getattr(loader, "stats", {})}
    )


def _result(
    c: EngineClient, version: str, newer: dict[str, int], errors: dict[str, str], t0: float
) -> EngineSyncResult:
    if c.url in newer:
        return EngineSyncResult(
            url=c.url,
            ok=True,
            seconds=0.0,
            weight_version=str(newer[c.url]),
            error=f"serves version {newer[c.url]}, newer than {version}: left as it is",
        )
    reported = None
    if c.url not in errors:
        try:
            reported = c.weight_version()
        except (EngineSyncError, requests.RequestException) as err:
            errors[c.url] = f"version check failed: {err}"
    if c.url not in errors and reported != version:
        errors[c.url] = f"{c.url} reports weight version {reported!r}, expected {version!r}"
    return EngineSyncResult(
        url=c.url,
        ok=c.url not in errors,
        seconds=time.perf_counter() - t0,
        weight_version=reported,
        error=errors.get(c.url),
    )


def sync_weights_from_disk(
    inp: SyncWeightsInput, heartbeat: Callable[[dict], None] = lambda d: None
) -> SyncWeightsOutput:
    return sync_weights_phased(inp, DirectoryLoader(inp.checkpoint), heartbeat)
