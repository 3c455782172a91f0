"""Full checkpoints written off the step's critical path.

A full checkpoint of the 2B model is ~25 GB (fp32 weights and AdamW's two moments): written and
fsynced inside the step, it held the step for tens of seconds. In the background instead:

1. the step's state — the model's state dict, the optimizer's, the RNG — is copied to host memory
   (`HostBuffers`: pinned on a GPU host and kept from one checkpoint to the next, so the copy runs at
   the bus's speed and allocates nothing after the first time);
2. the step commits at once as a light step (its record only: replay.py), and returns;
3. a thread writes the files from that copy and upgrades the step to a full checkpoint in place
   (atomic.upgrade_to_full: the files moved in, then the record replaced with one rename).

Until the upgrade lands the step is light: after a crash the trainer rebuilds it from the previous
full checkpoint by replaying the records, as for any light step, so exactly once is the light steps'
(a step is done when its record is committed). One write at a time: the next full checkpoint waits
for the one before (the host copy is reused). The thread is not a daemon: a trainer that exits
normally finishes its write first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from . import atomic

log = logging.getLogger(__name__)

# Pinned host memory comes from PyTorch's host allocator, which rounds each allocation up to a power
# of two: tensors are carved out of slabs of this size instead (one larger than a slab gets its own).
SLAB_BYTES = 2 << 30
_ALIGN = 64


class HostBuffers:
    """Host copies of device tensors, the same buffers from one snapshot to the next (keyed by name)."""

    def __init__(self, pinned: bool):
        self.pinned = pinned
        self._slabs: list[torch.Tensor] = []
        self._used: list[int] = []
        self._by_key: dict[object, torch.Tensor] = {}
        self.nbytes = 0  # host memory held

    def _empty(self, shape, dtype: torch.dtype) -> torch.Tensor:
        t = torch.empty(shape, dtype=dtype, pin_memory=self.pinned)
        self.nbytes += t.numel() * t.element_size()
        return t

    def _carve(self, nbytes: int) -> torch.Tensor:
        """A host byte buffer of `nbytes`: from a slab when it fits one, else its own (pinned) allocation."""
        if nbytes > SLAB_BYTES:
            return self._empty(nbytes, torch.uint8)
        i = next((j for j, used in enumerate(self._used) if used + nbytes <= SLAB_BYTES), None)
        if i is None:
            self._slabs.append(self._empty(SLAB_BYTES, torch.uint8))
            self._used.append(0)
            i = len(self._slabs) - 1
        start = self._used[i]
        self._used[i] = start + (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        return self._slabs[i][start : start + nbytes]

    def copy(self, key: object, t: torch.Tensor) -> torch.Tensor:
        """`t`'s values in this key's host buffer (queued without waiting from a GPU: see `wait`)."""
        t = t.detach()
        buf = self._by_key.get(key)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            if not self.pinned:  # plain host memory: no slab to carve from
                buf = self._empty(t.shape, t.dtype)
            else:
                nbytes = t.numel() * t.element_size()
                buf = self._carve(nbytes).view(t.dtype).view(t.shape)
            self._by_key[key] = buf
        buf.copy_(t, non_blocking=self.pinned and t.is_cuda)
        return buf


@dataclass
class Snapshot:
    """A full checkpoint's content in host memory: what atomic._write_checkpoint_files writes."""

    model: dict[str, torch.Tensor]
    optimizer: dict
    rng: dict


def take_snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer, buffers: HostBuffers) -> Snapshot:
    """The state as it is now, in host memory. Tied weights stay one buffer under both names."""
    seen: dict[tuple, torch.Tensor] = {}
    weights = {}
    for name, t in model.state_dict().items():
        ident = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        weights[name] = seen.get(ident)
        if weights[name] is None:
            weights[name] = seen[ident] = buffers.copy(("model", name), t)
    state = optimizer.state_dict()
    moments = {
        index: {k: buffers.copy(("optimizer", index, k), v) if isinstance(v, torch.Tensor) else v for k, v in s.items()}
        for index, s in state["state"].items()
    }
    devices = {t.device for t in model.parameters()}
    for device in devices:
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()  # the copies above were queued without waiting
    return Snapshot(weights, {"state": moments, "param_groups": state["param_groups"]}, atomic.capture_rng())


def write_snapshot(out: Path, snapshot: Snapshot, model: torch.nn.Module, base_model_path: str | Path) -> None:
    """The files of a full checkpoint, as atomic._write_checkpoint_files writes them, from a snapshot
    (`model` gives only the structure: its config, names and tied weights, never its values)."""
    out.mkdir(parents=True)
    atomic.write_model_dir(out, model, base_model_path, dict(snapshot.model))
    atomic.save_torch(snapshot.optimizer, out / "optimizer.pt")
    atomic.save_torch(snapshot.rng, out / "rng.pt")


@dataclass
class Written:
    step: int
    seconds: float | None  # None: the write failed (the step stays light)


class BackgroundCheckpoints:
    """The trainer's background writes: at most one in flight."""

    def __init__(self, pinned: bool):
        self.buffers = HostBuffers(pinned)
        self._thread: threading.Thread | None = None
        self._pending: tuple[str, int] | None = None  # (run_dir, step) being written
        self._done: list[Written] = []
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Waits for the write in flight, if any; the seconds waited."""
        t0 = time.perf_counter()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return time.perf_counter() - t0

    def wait_for(self, run_dir: str | Path, step: int) -> None:
        """Waits if step N of `run_dir` is the one being written."""
        if self._pending == (str(Path(run_dir)), step):
            self.wait()

    def start(
        self,
        run_dir: str | Path,
        step: int,
        attempt: str,
        write: Callable[[Path], None],
        after: Callable[[], None] = lambda: None,
    ) -> None:
        """Writes and upgrades committed light step N (its record's `attempt`) in a thread; `after` runs
        once it is full (retention)."""
        self.wait()
        self._pending = (str(Path(run_dir)), step)

        def run() -> None:
            seconds = None
            try:
                seconds = atomic.upgrade_to_full(run_dir, step, attempt, write)
                if seconds is not None:
                    after()
            except Exception:  # the step stays light: replayed from the previous full checkpoint if need be
                log.exception("background checkpoint of step %d in %s failed; the step stays light", step, run_dir)
            with self._lock:
                self._done.append(Written(step, seconds))
                self._pending = None

        self._thread = threading.Thread(target=run, name=f"checkpoint-step-{step}", daemon=False)
        self._thread.start()

    def metrics(self) -> dict[str, float]:
        """The writes finished since the last call: the newest one's seconds, and how many failed."""
        with self._lock:
            done, self._done = self._done, []
        out: dict[str, float] = {}
        ok = [w.seconds for w in done if w.seconds is not None]
        if ok:
            out["perf/checkpoint_background_seconds"] = ok[-1]
        if any(w.seconds is None for w in done):
            out["perf/checkpoint_background_failures"] = float(sum(w.seconds is None for w in done))
        return out
