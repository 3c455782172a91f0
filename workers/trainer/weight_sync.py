"""Weight sync: new weights from the trainer into every engine, then the engines report the new version.

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
reloads. Re-running a sync for the same version reloads the same weights: idempotent, safe to retry.

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

import time
from collections.abc import Callable

import requests

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


def sync_engine(client: EngineClient, inp: SyncWeightsInput, load: Callable[[EngineClient], None]) -> EngineSyncResult:
    t0 = time.perf_counter()
    version = str(inp.weight_version)
    try:
        client.pause(inp.pause_mode)
        try:
            load(client)
            client.reset_prefix_cache()
            client.set_weight_version(version)
        finally:
            client.resume()  # never leave an engine paused, even when the load failed
        reported = client.weight_version()
        if reported != version:
            raise EngineSyncError(f"{client.url} reports weight version {reported!r}, expected {version!r}")
        return EngineSyncResult(url=client.url, ok=True, seconds=time.perf_counter() - t0, weight_version=reported)
    except (EngineSyncError, requests.RequestException) as err:
        return EngineSyncResult(url=client.url, ok=False, seconds=time.perf_counter() - t0, error=str(err))


def sync_weights_from_disk(inp: SyncWeightsInput, heartbeat: Callable[[dict], None] = lambda d: None) -> SyncWeightsOutput:
    results = []
    for url in inp.engines:
        heartbeat({"phase": "reloading", "engine": url})
        results.append(sync_engine(EngineClient(url), inp, lambda c: c.reload_weights(inp.checkpoint)))
        heartbeat({"engine": url, "ok": results[-1].ok})
    return SyncWeightsOutput(weight_version=inp.weight_version, engines=results)


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
