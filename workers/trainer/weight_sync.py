"""Weight sync: new weights from the trainer into every engine, then the engines report the new version.

All engines move together, in phases (sync_weights_phased): pause all, load all, label the new version
on those that loaded, resume all, read the labels back. An engine that failed any phase is labelled
"unusable" (the rollout side retries its tokens elsewhere) and retried at the next sync; the activity
fails (retryably) only when no engine took the version. A version never goes backwards: an engine that
already serves a newer one (a stale retry arriving late) is left alone.

Disk transport (CPU, or GPU engines that share the trainer's filesystem) — vLLM 0.32 routes, served
when the engine runs with VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/rl/online/api_router.py and
vllm/entrypoints/serve/dev/{rpc,cache}/api_router.py):

    POST /pause?mode=wait                      finish (or abort/keep) in-flight requests, stop scheduling
    POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": CHECKPOINT}}
                                               every worker reloads the safetensors of CHECKPOINT in place
                                               (vllm.model_executor.model_loader.reload.inplace)
    POST /reset_prefix_cache                   {"success": bool}; false while blocks are held → retried
    POST /update_weight_version {"new_version": "V"}
    POST /resume
    GET  /weight_info                          {"weight_version": "V"} — checked after the resume

The checkpoint directory is a Hugging Face model directory (checkpoint.py), so it is what the engine
reloads. With a remote blob store (s3://) the engines share no filesystem with the trainer: the reload
is POST /collective_rpc {"method": "tempo_rl_reload_from_store", "kwargs": {"store", "key"}} instead, and
each engine pulls the committed weights from the store itself (engine_store.py). Re-running a sync for the same version reloads the same weights: idempotent, safe to retry.

NCCL transport (GPU): vLLM's weight-transfer engine, started on the engine with
`--weight-transfer-config '{"backend": "nccl"}'`. The trainer (rank 0) and the engine workers
(ranks 1..world_size−1) rendezvous once through POST /init_weight_transfer_engine; each sync is then
POST /start_weight_update → POST /update_weights (names, dtypes, shapes) concurrently with an NCCL
broadcast of the parameters from the trainer's GPU → POST /finish_weight_update, wrapped in the same
pause / reset prefix cache / version / resume as above. `NcclWeightSender` drives this with vLLM's own
trainer-side engine (NCCLTrainerWeightTransferEngine + HTTPVLLMWeightSyncClient), so the trainer
needs the `vllm` package on GPU hosts. UNTESTED: it needs a GPU engine and a second process group;
one GPU shared with the trainer would also work through the CUDA-IPC backend ("ipc"), not wired here.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import requests

from .checkpoint_store import is_location, store_and_key
from .contract import EngineSyncResult, SyncWeightsInput, SyncWeightsOutput


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

    def reload_weights(self, weights_path: str) -> None:
        """`weights_path`: a model directory on the engine's host, or a store location (checkpoint_store.py)
        that the engine pulls from the store itself (engine_store.py)."""
        if is_location(weights_path):
            store, key = store_and_key(weights_path)
            self._call("POST", "/collective_rpc", json={"method": "tempo_rl_reload_from_store",
                                                       "kwargs": {"store": store, "key": key}})
            return
        self._call("POST", "/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": weights_path}})

    def reset_prefix_cache(self, attempts: int = 20, delay_s: float = 0.25) -> None:
        for _ in range(attempts):
            out = self._call("POST", "/reset_prefix_cache")
            if out is None or out.get("success", True):
                return
            time.sleep(delay_s)
        raise EngineSyncError(f"{self.url}: prefix cache still in use after {attempts} reset attempts")

    def set_weight_version(self, version: str) -> None:
        self._call("POST", "/update_weight_version", json={"new_version": version})

    def weight_version(self) -> str | None:
        return (self._call("GET", "/weight_info") or {}).get("weight_version")


# The label of an engine whose reload failed: not a number, so the rollout side reads its tokens as
# of an unknown version and retries them on another engine (activities/generate.ts).
UNUSABLE = "unusable"

# What this process last put on each engine, (run id, version): versions are numbered per run, so
# "never backwards" holds within a run. One sync at a time: a timed-out attempt that is still running
# and its retry never interleave their pause / reload / resume on one engine (a trainer that died
# cannot sync any more; its retry runs in the new process).
_SYNCED: dict[str, tuple[str, int]] = {}
_SYNC_LOCK = threading.Lock()


def _each(clients: list[EngineClient], fn: Callable[[EngineClient], None]) -> dict[str, str]:
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
        return {c.url: e for c, e in zip(clients, pool.map(one, clients)) if e is not None}


def sync_weights_phased(inp: SyncWeightsInput, load: Callable[[EngineClient], None],
                        heartbeat: Callable[[dict], None] = lambda d: None) -> SyncWeightsOutput:
    """Version V onto every engine, all or nothing per engine: pause all → load all → reset the prefix
    cache and label V on those that loaded → resume all → read every label back. An engine whose pause,
    load or reset failed is labelled UNUSABLE before its resume (never V, nor its old version over
    half-loaded weights), so no episode takes its tokens; the next sync tries it again. An engine that
    already has a newer version of the same run from this process is left alone: versions never go
    backwards."""
    with _SYNC_LOCK:
        out = _sync_locked(inp, load, heartbeat)
        for e in out.engines:
            if e.ok and e.error is None:
                _SYNCED[e.url] = (inp.run_id, inp.weight_version)
        return out


def _sync_locked(inp: SyncWeightsInput, load: Callable[[EngineClient], None],
                 heartbeat: Callable[[dict], None]) -> SyncWeightsOutput:
    t0 = time.perf_counter()
    version = str(inp.weight_version)
    clients = [EngineClient(u) for u in inp.engines]
    newer = {c.url: v for c in clients if (r := _SYNCED.get(c.url)) and r[0] == inp.run_id and (v := r[1]) > inp.weight_version}
    targets = [c for c in clients if c.url not in newer]
    heartbeat({"phase": "pausing", "engines": len(targets)})
    errors = _each(targets, lambda c: c.pause(inp.pause_mode))
    paused = [c for c in targets if c.url not in errors]
    heartbeat({"phase": "reloading", "engines": len(paused)})
    errors |= _each(paused, load)
    errors |= _each([c for c in paused if c.url not in errors], lambda c: (c.reset_prefix_cache(), c.set_weight_version(version)))
    _each([c for c in paused if c.url in errors], lambda c: c.set_weight_version(UNUSABLE))
    heartbeat({"phase": "resuming", "engines": len(paused)})
    errors |= {url: f"resume failed: {e}" for url, e in _each(paused, lambda c: c.resume()).items() if url not in errors}
    results = []
    for c in clients:
        if c.url in newer:
            results.append(EngineSyncResult(url=c.url, ok=True, seconds=0.0, weight_version=str(newer[c.url]),
                                            error=f"serves version {newer[c.url]}, newer than {version}: left as it is"))
            continue
        reported = None
        if c.url not in errors:
            try:
                reported = c.weight_version()
            except (EngineSyncError, requests.RequestException) as err:
                errors[c.url] = f"version check failed: {err}"
        if c.url not in errors and reported != version:
            errors[c.url] = f"{c.url} reports weight version {reported!r}, expected {version!r}"
        results.append(EngineSyncResult(url=c.url, ok=c.url not in errors, seconds=time.perf_counter() - t0,
                                        weight_version=reported, error=errors.get(c.url)))
    return SyncWeightsOutput(weight_version=inp.weight_version, engines=results)


def sync_weights_from_disk(inp: SyncWeightsInput, heartbeat: Callable[[dict], None] = lambda d: None) -> SyncWeightsOutput:
    return sync_weights_phased(inp, lambda c: c.reload_weights(inp.checkpoint), heartbeat)


class NcclWeightSender:
    """GPU path (UNTESTED, see the module docstring): broadcast the in-memory parameters to one engine.

    One instance per engine, kept by the worker between syncs (the NCCL group is set up once)."""

    def __init__(self, url: str, model, master_address: str, master_port: int, engine_world_size: int):
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.nccl_engine import (NCCLTrainerInitInfo,
                                                                  NCCLTrainerWeightTransferEngine)

        info = NCCLTrainerInitInfo(master_address=master_address, master_port=master_port,
                                   world_size=engine_world_size + 1, rank=0)
        self.engine = NCCLTrainerWeightTransferEngine.trainer_init(
            info, client=HTTPVLLMWeightSyncClient(url), source=ModuleSource(model))

    def send(self, client: EngineClient) -> None:
        self.engine.send_weights()  # start_weight_update → update_weights ∥ broadcast → finish_weight_update
