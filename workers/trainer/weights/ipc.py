"""The `ipc` weight transport: the trainer's in-memory weights into engines on its own GPU(s) (or, on
CPU, its own host), with no checkpoint file in between.

The weights go in the names and layout of the model's checkpoint (`engine_tensors`: what the disk
transport's reload reads), cast to the engines' dtype, packed in the model's order into buckets of
`engines.ipc_bucket_mb` (tempo_common/weight_buckets.py). Two buffers take turns: the trainer packs bucket
k + 1 into one while the engines load bucket k from the other, and refills a buffer only once every
engine has answered for it (an engine copies a bucket before it answers). On each engine:
begin → a load per bucket → finish (tempo_engine/extension.py), through POST /collective_rpc, all
inside sync.py's pause … resume. An engine that fails a bucket gets no more of them and is
labelled unusable; the others go on.

With a data-parallel trainer (model.num_gpus > 1) every rank packs the full weights on its own GPU
(gathered from the shards), the handles are gathered on rank 0, and rank 0 sends each bucket once
with one handle per GPU: each engine opens its own GPU's (worker/data_parallel.py)."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from tempo_common import weight_buckets
from tempo_common.weight_buckets import UPDATE_MODES
from ..model.moe_layout import released_layout

Tensors = Callable[[], Iterator[tuple[str, torch.Tensor]]]


def engine_tensors(
    model: torch.nn.Module, gather: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's weights as its checkpoint holds them (checkpoint/atomic.py's write_model_dir writes the same):
    the parameters under their names, fused MoE experts in the released layout, and a tied LM head
    under its own name too (vLLM reprocesses that layer only when it is named: write_tied_lm_head)."""
    model_type = getattr(model.config, "model_type", None)
    for name, param in model.named_parameters():
        yield name, released_layout(name, gather(param.detach()), model_type)
    text_cfg = getattr(model.config, "text_config", model.config)
    if getattr(model.config, "tie_word_embeddings", False) or getattr(text_cfg, "tie_word_embeddings", False):
        yield "lm_head.weight", gather(model.get_output_embeddings().weight.detach())


def specs(model: torch.nn.Module, dtype: torch.dtype) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of engine_tensors without moving any data (a sharded parameter's shape is
    the whole tensor's)."""
    model_type = getattr(model.config, "model_type", None)
    name = weight_buckets.dtype_name(dtype)
    out = [
        (n, name, tuple(released_layout(n, torch.empty(p.shape, device="meta"), model_type).shape))
        for n, p in model.named_parameters()
    ]
    text_cfg = getattr(model.config, "text_config", model.config)
    if getattr(model.config, "tie_word_embeddings", False) or getattr(text_cfg, "tie_word_embeddings", False):
        out.append(("lm_head.weight", name, tuple(model.get_output_embeddings().weight.shape)))
    return out


class BucketPacker:
    """Fills buckets on one device, two buffers taking turns (CUDA), or a new /dev/shm file each (CPU)."""

    def __init__(self, device: torch.device, plan: list[list[weight_buckets.Entry]]):
        self.device = device
        self.plan = plan
        self.size = max(weight_buckets.size_of(b) for b in plan)
        self._buffers: list[torch.Tensor] = []
        self._files: list[str] = []

    def pack(self, index: int, tensors: Iterator[tuple[str, torch.Tensor]]) -> dict:
        """Bucket `index`, filled from `tensors` (the next ones in order); its description, without handles
        (`share` adds this rank's)."""
        entries = self.plan[index]
        nbytes = weight_buckets.size_of(entries)
        if self.device.type == "cuda":
            while len(self._buffers) < 2:
                self._buffers.append(torch.empty(self.size, dtype=torch.uint8, device=self.device))
            buf, where = self._buffers[index % 2], {"kind": "cuda_ipc"}
        else:
            path = weight_buckets.shm_path(uuid.uuid4().hex)
            buf, where = weight_buckets.create_shm(path, nbytes), {"kind": "shm", "path": path}
            self._files.append(path)
        for (name, dst), entry in zip(weight_buckets.views(buf, entries), entries, strict=False):
            got_name, src = next(tensors)
            if got_name != name or tuple(src.shape) != entry.shape:
                raise RuntimeError(f"bucket {index}: expected {name} {entry.shape}, got {got_name} {tuple(src.shape)}")
            dst.copy_(src)
        self._current = buf
        return {**where, "nbytes": nbytes, "tensors": [e.to_json() for e in entries]}

    def share(self) -> dict[str, list]:
        """{GPU UUID: handle} of the buffer just packed (CUDA); {} on CPU."""
        if self.device.type != "cuda":
            return {}
        return {weight_buckets.gpu_uuid(self.device): weight_buckets.share_cuda(self._current)}

    def close(self) -> None:
        """Frees the buffers (their memory goes back to the engines) and removes the files."""
        self._buffers.clear()
        self._current = None
        for path in self._files:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._files.clear()
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()
            torch.cuda.empty_cache()


def bucket_plan(model: torch.nn.Module, dtype: torch.dtype, capacity_bytes: int) -> list[list[weight_buckets.Entry]]:
    return weight_buckets.plan(specs(model, dtype), capacity_bytes)


def packed_buckets(
    packer: BucketPacker,
    tensors: Iterable[tuple[str, torch.Tensor]],
    exchange: Callable[[dict[str, list]], dict[str, list]] = lambda h: h,
) -> Iterator[dict]:
    """Each bucket's full description in turn (copying into a bucket casts to the engines' dtype).
    `exchange` merges this rank's handles with the other ranks' (data parallel: every rank calls this
    in step); a single process's are its own."""
    it = iter(tensors)
    for index in range(len(packer.plan)):
        desc = packer.pack(index, it)
        handles = exchange(packer.share())
        if handles:
            desc["handles"] = handles
        yield desc


def send_buckets(
    descs: Iterable[dict],
    post: Callable[[str], dict[str, str]],
    heartbeat: Callable[[dict], None],
    after_each: Callable[[], None] | None = None,
) -> tuple[dict[str, str], int, float]:
    """Posts each bucket: post(bucket JSON) loads it on every engine still in the update and returns
    their errors. Returns (errors, bytes sent, seconds).

    One process: bucket k + 1 is packed (in next()) while the engines load bucket k. With `after_each`
    (data parallel: a barrier that keeps the other ranks from refilling their buffers) each bucket is
    posted and answered before the next is packed."""
    t0 = time.perf_counter()
    errors: dict[str, str] = {}
    sent = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending: Future | None = None
        for index, desc in enumerate(descs):
            if pending is not None:
                errors |= pending.result()
            heartbeat({"phase": "loading", "bucket": index, "bytes": sent})
            pending = pool.submit(post, json.dumps(desc))
            sent += int(desc["nbytes"])
            if after_each is not None:
                errors |= pending.result()
                pending = None
                after_each()
        if pending is not None:
            errors |= pending.result()
    return errors, sent, time.perf_counter() - t0


class Buckets:
    """One sync's buckets on this trainer: their descriptions in turn, and what follows each posted one
    (None for one process; a barrier across data-parallel ranks). `close` frees the buffers."""

    def __init__(self, descs: Iterator[dict], packer: BucketPacker, after_each: Callable[[], None] | None = None):
        self.descs, self.packer, self.after_each = descs, packer, after_each

    @classmethod
    def of(cls, model: torch.nn.Module, dtype: torch.dtype, capacity_bytes: int) -> Buckets:
        packer = BucketPacker(next(model.parameters()).device, bucket_plan(model, dtype, capacity_bytes))
        return cls(packed_buckets(packer, engine_tensors(model)), packer)


class EnginePhases:
    """Where the engines' side of a sync went: for each call to the engines, the slowest worker's
    seconds of each phase its answer names, summed over the calls (`engine_<phase>_seconds`); and the
    update modes the workers took."""

    def __init__(self):
        self._lock = threading.Lock()
        self._calls: dict[str, dict[str, float]] = {}
        self.modes: list[str] = []

    def add(self, call: str, answers: list) -> None:
        """`answers`: the workers' results of one call (dicts with `<phase>_seconds` entries; anything
        else, such as an older engine's None, is passed over)."""
        with self._lock:
            for answer in (a for a in answers if isinstance(a, dict)):
                if isinstance(answer.get("mode"), str):
                    self.modes.append(answer["mode"])
                slot = self._calls.setdefault(call, {})
                for key, value in answer.items():
                    if key.endswith("_seconds") and isinstance(value, (int, float)):
                        slot[key] = max(slot.get(key, 0.0), float(value))

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for phases in self._calls.values():
            for key, value in phases.items():
                out[f"engine_{key}"] = out.get(f"engine_{key}", 0.0) + value
        return out


class IpcLoader:
    """The ipc transport's load phase (sync.Loader): begin on every engine, the buckets in turn to
    the engines still in the update, finish on those. `source`: a model, or a callable that opens the
    Buckets itself (data parallel: every rank packs). `mode`: the engines' update mode
    (tempo_engine/extension.py; engines.ipc_load; bench/weight-sync.py --load-mode)."""

    def __init__(
        self,
        source: torch.nn.Module | Callable[[], Buckets],
        dtype: torch.dtype,
        capacity_bytes: int,
        mode: str = UPDATE_MODES[0],
    ):
        self.open = (
            source if not isinstance(source, torch.nn.Module) else (lambda: Buckets.of(source, dtype, capacity_bytes))
        )
        self.mode = mode
        self.stats: dict[str, float] = {}

    def load(self, clients, heartbeat: Callable[[dict], None]) -> dict[str, str]:
        from .sync import each

        phases = EnginePhases()
        t0 = time.perf_counter()
        errors = each(clients, lambda c: phases.add("begin", c.rpc("tempo_rl_begin_update", mode=self.mode)))
        begin_seconds = time.perf_counter() - t0
        active = [c for c in clients if c.url not in errors]
        posted = itertools.count()

        def post(bucket: str) -> dict[str, str]:
            call = f"bucket{next(posted)}"
            failed = each(list(active), lambda c: phases.add(call, c.rpc("tempo_rl_load_bucket", bucket=bucket)))
            active[:] = [c for c in active if c.url not in failed]
            return failed

        sent, seconds, opened = 0, 0.0, None
        try:
            with torch.no_grad():
                opened = self.open()
                failed, sent, seconds = send_buckets(opened.descs, post, heartbeat, opened.after_each)
        except (
            RuntimeError,
            OSError,
            weight_buckets.BucketError,
        ) as err:  # the trainer's side failed: no engine has the weights
            failed = {c.url: f"packing the weights failed: {err}" for c in active}
            active.clear()
        finally:
            if opened is not None:
                opened.packer.close()
        errors |= failed
        t1 = time.perf_counter()
        errors |= each(active, lambda c: phases.add("finish", c.rpc("tempo_rl_finish_update")))
        self.stats = {
            "transfer_bytes": float(sent),
            "transfer_seconds": seconds,
            "buckets": float(len(opened.packer.plan)) if opened is not None else 0.0,
            "begin_seconds": begin_seconds,
            "finish_seconds": time.perf_counter() - t1,
            # workers that copied each weight in place (the rest reloaded layer by layer)
            "direct_loads": float(phases.modes.count("direct")),
            **phases.totals(),
        }
        return errors
