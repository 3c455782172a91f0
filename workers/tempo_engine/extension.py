"""tempo-rl's vLLM worker extension: new weights without a model directory of the engine's own.

`tempo-rl engine start` passes `--worker-extension-cls tempo_engine.extension.TempoRlWorker` when the
weights do not come from a directory the engine shares with the trainer (supervise/engines.ts). vLLM mixes
the class into every engine worker, and the dev-mode route POST /collective_rpc {"method", "kwargs"}
runs a method on all of them (kwargs are JSON strings: the route passes them as they are):

- `tempo_rl_reload_from_store(store, key)`: pull a committed checkpoint from the blob store and reload
  it in place (weights_from_store.py), for engines on hosts apart from the trainer;
- `tempo_rl_begin_update()`, `tempo_rl_load_bucket(bucket)` × n, `tempo_rl_finish_update()`: the
  weights in buckets (tempo_common/weight_buckets.py) — CUDA IPC on a GPU the trainer shares, /dev/shm on CPU — through
  vLLM's layer-wise reload, the path its own in-place `reload_weights` and weight-transfer engines take
  (each layer is reprocessed once whole: re-packed GEMM weights on CPU, fused or quantized layouts).

An update left half done (its trainer died mid-sync) is finished before a new one begins: the
layer-wise bookkeeping of the old one would otherwise swallow the new weights. The sync that follows
loads every weight again, and the engine is labelled unusable until one completes
(trainer/weights/sync.py)."""

from __future__ import annotations

import json
import time

import torch

from tempo_common.weight_buckets import entries_of, open_bucket, views


class TempoRlWorker:
    """Mixed into vLLM's Worker: `self.model_runner` and `self.device` are the worker's."""

    _tempo_rl_updating = False

    def _tempo_rl_model(self) -> torch.nn.Module:
        return self.model_runner.get_model()

    def _tempo_rl_device(self) -> torch.device:
        device = getattr(self, "device", None)
        return torch.device(device) if device is not None else torch.device("cpu")

    def tempo_rl_reload_from_store(self, store: str, key: str) -> str:
        from .weights_from_store import pull_weights

        local = pull_weights(store, key)
        self.reload_weights(weights_path=str(local))
        return str(local)

    def tempo_rl_device_uuid(self) -> str | None:
        """The worker's GPU (None on CPU): which of a bucket's handles it opens."""
        device = self._tempo_rl_device()
        return str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else None

    def tempo_rl_begin_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if self._tempo_rl_updating:
            self.tempo_rl_finish_update()
        initialize_layerwise_reload(self._tempo_rl_model())
        self._tempo_rl_updating = True

    def tempo_rl_load_bucket(self, bucket: str) -> dict:
        """Loads one bucket (its JSON description); returns {"bytes", "tensors", "seconds"}."""
        if not self._tempo_rl_updating:
            raise RuntimeError("tempo_rl_load_bucket without tempo_rl_begin_update")
        t0 = time.perf_counter()
        desc = json.loads(bucket)
        entries = entries_of(desc)
        buf = open_bucket(desc, self._tempo_rl_device())
        self._tempo_rl_model().load_weights(views(buf, entries))
        if buf.is_cuda:
            torch.cuda.synchronize(buf.device)  # the trainer refills its buffer once this returns
        return {"bytes": int(desc["nbytes"]), "tensors": len(entries), "seconds": time.perf_counter() - t0}

    def tempo_rl_finish_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        self._tempo_rl_updating = False
        finalize_layerwise_reload(self._tempo_rl_model(), self.model_runner.model_config)
