"""The trainer's GPU memory: the caching allocator's mode while a step trains, and the step's memory
metrics.

A step's activations come and go micro-batch by micro-batch, each packed row of another length (and
another set of images). With PyTorch's default caching allocator every size leaves blocks of its own
in fixed segments: over many micro-batches the free memory splinters, a large request (an LM-head
chunk, a long row's activations) finds no block that fits, the allocator frees its whole cache and
retries (`num_alloc_retries`, each a device synchronisation and cudaFree/cudaMalloc round), and then
runs out of memory with gigabytes free in pieces. Expandable segments (CUDA virtual memory: a segment
grows by mapping pages) leave no such pieces. They cannot be shared by CUDA IPC (pytorch#130330),
which the ipc weight transport does with its buckets, so the trainer turns them on for the step's
training only (`training_allocator`); blocks from expandable segments are not handed to allocations
made while they are off (the allocator's own rule, there for this use). TEMPO_RL_EXPANDABLE_SEGMENTS=0
keeps the default allocator throughout (to compare).

`StepMemory` reads the step's memory figures: the device's free memory as the step starts (engines
asleep when colocated), the peak allocated and reserved by PyTorch, and the allocator's retries
during the step — perf/* metrics, on CUDA only."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch

GIB = 2**30


def expandable_segments_wanted() -> bool:
    return os.environ.get("TEMPO_RL_EXPANDABLE_SEGMENTS", "1") != "0"


def set_expandable_segments(on: bool) -> bool:
    """Expandable segments on or off for the allocations made from now on; False where this torch has no
    runtime switch or there is no CUDA device (nothing changed)."""
    if not torch.cuda.is_available():
        return False
    setting = f"expandable_segments:{'True' if on else 'False'}"
    for setter in (
        getattr(torch._C, "_accelerator_setAllocatorSettings", None),
        getattr(torch._C, "_cuda_cudaCachingAllocator_set_allocator_settings", None),
    ):
        if setter is not None:
            setter(setting)
            return True
    return False


@contextmanager
def training_allocator(device: torch.device) -> Iterator[bool]:
    """Expandable segments for the duration (on a CUDA device, unless TEMPO_RL_EXPANDABLE_SEGMENTS=0);
    yields whether they are on."""
    on = device.type == "cuda" and expandable_segments_wanted() and set_expandable_segments(True)
    try:
        yield on
    finally:
        if on:
            set_expandable_segments(False)


class StepMemory:
    """The memory figures of one step on `device` (nothing on a CPU): start() as the step begins,
    metrics() once it has trained."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._retries = 0
        self._free = 0

    def start(self) -> StepMemory:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            self._retries = int(torch.cuda.memory_stats(self.device).get("num_alloc_retries", 0))
            self._free = torch.cuda.mem_get_info(self.device)[0]
        return self

    def metrics(self, expandable: bool = False) -> dict[str, float]:
        if not self.cuda:
            return {}
        stats = torch.cuda.memory_stats(self.device)
        return {
            "perf/train_peak_allocated_gib": torch.cuda.max_memory_allocated(self.device) / GIB,
            "perf/train_peak_reserved_gib": torch.cuda.max_memory_reserved(self.device) / GIB,
            "perf/train_alloc_retries": float(int(stats.get("num_alloc_retries", 0)) - self._retries),
            "perf/train_gpu_free_gib": self._free / GIB,
            "perf/train_expandable_segments": 1.0 if expandable else 0.0,
        }


class LiveTensorBytes:
    """The bytes of live tensor storages created while it is entered, and their peak — what a step keeps
    alive, measured on any device (a CPU included, where no allocator counts): a dispatch mode that
    notes every new storage and forgets it when it is freed. Slow; for benches and tests."""

    def __init__(self):
        from torch.utils import _pytree
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                # a view or an in-place result shares an input's storage: nothing new (perhaps made before)
                inputs = {
                    t.untyped_storage().data_ptr()
                    for t in _pytree.tree_leaves((args, kwargs))
                    if isinstance(t, torch.Tensor) and t.device.type != "meta"
                }
                for t in _pytree.tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.device.type != "meta":
                        if t.untyped_storage().data_ptr() not in inputs:
                            tracker._note(t)
                return out

        self._mode = _Mode()
        self._live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def _note(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if not key or not nbytes or key in self._live:
            return
        self._live[key] = nbytes
        self.now += nbytes
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self._freed, key)

    def _freed(self, key: int) -> None:
        self.now -= self._live.pop(key, 0)

    def __enter__(self) -> LiveTensorBytes:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
