"""tempo-rl's vLLM worker extension: new weights without a model directory of the engine's own.

`tempo-rl engine start` passes `--worker-extension-cls tempo_engine.extension.TempoRlWorker` when the
weights do not come from a directory the engine shares with the trainer (supervise/engines.ts). vLLM mixes
the class into every engine worker, and the dev-mode route POST /collective_rpc {"method", "kwargs"}
runs a method on all of them (kwargs are JSON strings: the route passes them as they are):

- `tempo_rl_reload_from_store(store, key)`: pull a committed checkpoint from the blob store and reload
  it in place (weights_from_store.py), for engines on hosts apart from the trainer;
- `tempo_rl_weights_digest()`: a digest of every parameter and buffer the worker computes with, by name
  (whether two loads left the same bits: bench/engine-invariance.py, tests/python/test_weight_ipc.py);
- `tempo_rl_begin_update(mode)`, `tempo_rl_load_bucket(bucket)` × n, `tempo_rl_finish_update()`: the
  weights in buckets (tempo_common/weight_buckets.py) — CUDA IPC on a GPU the trainer shares, /dev/shm
  on CPU — copied in place where their loaded form is the checkpoint's (`auto`, engines.ipc_load's
  default, on a GPU) or through vLLM's layer-wise reload, the path its own in-place `reload_weights`
  and weight-transfer engines take (each layer is reprocessed once whole: re-packed GEMM weights on
  CPU, fused or quantized layouts).

An update left half done (its trainer died mid-sync) is finished before a new one begins: the
layer-wise bookkeeping of the old one would otherwise swallow the new weights. The sync that follows
loads every weight again, and the engine is labelled unusable until one completes
(trainer/weights/sync.py)."""

from __future__ import annotations

import hashlib
import itertools
import json
import time

import torch

from tempo_common.weight_buckets import UPDATE_MODES, entries_of, open_bucket, views


class TempoRlWorker:
    """Mixed into vLLM's Worker: `self.model_runner` and `self.device` are the worker's."""

    _tempo_rl_updating = False
    _tempo_rl_mode = "layerwise"

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

    def tempo_rl_weights_digest(self) -> dict:
        """{name: the first 16 hex digits of sha256 over its bytes} for every parameter and buffer of the
        model: equal digests, the same bits (copied to the host one tensor at a time)."""
        model = self._tempo_rl_model()
        tensors = itertools.chain(model.named_parameters(), model.named_buffers())
        return {name: _digest(t) for name, t in tensors}

    def tempo_rl_device_uuid(self) -> str | None:
        """The worker's GPU (None on CPU): which of a bucket's handles it opens."""
        device = self._tempo_rl_device()
        return str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else None

    def _tempo_rl_direct_ok(self) -> bool:
        """Whether every weight's loaded form is its checkpoint form, so that a weight loader can copy
        it into the engine's parameter in place: unquantized weights on a GPU, no fused experts (whose
        GPU kernels may lay their weights out anew after loading). Elsewhere (CPU: re-packed GEMM
        weights; quantized layers) each layer is reprocessed: layer-wise."""
        if self._tempo_rl_device().type != "cuda" or self.model_runner.model_config.quantization is not None:
            return False
        # by name: the class moves between vLLM releases (and has subclasses: SharedFusedMoE)
        return not any(any(c.__name__ == "FusedMoE" for c in type(m).__mro__) for m in self._tempo_rl_model().modules())

    def tempo_rl_begin_update(self, mode: str = UPDATE_MODES[0]) -> dict:
        """`mode`: "auto" (direct where _tempo_rl_direct_ok holds, else layer-wise: a sync's default,
        engines.ipc_load), "layerwise" (vLLM's layer-wise reload: each layer's weights gathered, then
        loaded and reprocessed whole) or "direct" (each weight copied into its parameter by the model's
        loaders, nothing reprocessed: right only where _tempo_rl_direct_ok holds; for the bench).
        Measured on the 2B shape on an H100: 0.032–0.034 s/GB in place, 0.070–0.074 layer-wise
        (docs/benchmarks.md "Weight sync").
        Returns {"begin_seconds", "mode"} (the route passes a dict as it is, a number as text)."""
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        t0 = time.perf_counter()
        if mode not in UPDATE_MODES:
            raise ValueError(f"update mode {mode!r}: one of {', '.join(UPDATE_MODES)}")
        if self._tempo_rl_updating:
            self.tempo_rl_finish_update()
        if mode == "auto":
            mode = "direct" if self._tempo_rl_direct_ok() else "layerwise"
        if mode == "layerwise":
            initialize_layerwise_reload(self._tempo_rl_model())
        self._tempo_rl_mode = mode
        self._tempo_rl_updating = True
        return {"begin_seconds": time.perf_counter() - t0, "mode": mode}

    def tempo_rl_load_bucket(self, bucket: str) -> dict:
        """Loads one bucket (its JSON description); returns {"bytes", "tensors", "seconds"} and the
        seconds' parts (`open_seconds`, `load_seconds`, `sync_seconds`)."""
        if not self._tempo_rl_updating:
            raise RuntimeError("tempo_rl_load_bucket without tempo_rl_begin_update")
        t0 = time.perf_counter()
        desc = json.loads(bucket)
        entries = entries_of(desc)
        buf = open_bucket(desc, self._tempo_rl_device())
        t1 = time.perf_counter()
        self._tempo_rl_model().load_weights(views(buf, entries))
        t2 = time.perf_counter()
        if buf.is_cuda:
            torch.cuda.synchronize(buf.device)  # the trainer refills its buffer once this returns
        t3 = time.perf_counter()
        # open: the mapping and its private copy (on a GPU, queued work: mostly waits in the sync);
        # load: vLLM's loaders on the host; sync: the GPU catching up with both
        return {
            "bytes": int(desc["nbytes"]),
            "tensors": len(entries),
            "seconds": t3 - t0,
            "open_seconds": t1 - t0,
            "load_seconds": t2 - t1,
            "sync_seconds": t3 - t2,
        }

    def tempo_rl_finish_update(self) -> dict:
        """Returns {"finish_seconds"} (the layer-wise reload's last layers are reprocessed here)."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        t0 = time.perf_counter()
        self._tempo_rl_updating = False
        if self._tempo_rl_mode == "layerwise":
            finalize_layerwise_reload(self._tempo_rl_model(), self.model_runner.model_config)
        device = self._tempo_rl_device()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return {"finish_seconds": time.perf_counter() - t0}


def _digest(t: torch.Tensor) -> str:
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()
    return hashlib.sha256(raw.tobytes()).hexdigest()[:16]
