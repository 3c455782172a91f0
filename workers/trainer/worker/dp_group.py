"""The torchrun group of a data-parallel trainer (data_parallel.py): its ranks, devices and the few
ways its ranks agree.

Rank r trains on cuda:LOCAL_RANK when CUDA is available (NCCL for CUDA tensors, gloo for CPU ones),
else on the CPU over gloo. Commands from rank 0 travel on a second, gloo-only group whose timeout is
long: the other ranks wait on it, idle, for as long as the run takes between two steps, while the
training collectives keep the default timeout (a real hang still fails).

Errors: a step's phases that can fail for a reason of the data (a sample, a checkpoint file) run
through `agreed`/`from_rank0`: every rank learns of the failure and raises the same exception, marked
`agreed`, so the group stays in step and rank 0 reports it to Temporal. Any other failure inside a
step leaves the ranks out of step; data_parallel.py then ends the process and torchrun ends the group."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")
# Between two steps the other ranks wait for rank 0's next command: as long as rollouts take.
COMMAND_TIMEOUT = datetime.timedelta(days=30)


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def mark_agreed(err: BaseException) -> BaseException:
    err.tempo_rl_agreed = True  # type: ignore[attr-defined]
    return err


def is_agreed(err: BaseException) -> bool:
    return getattr(err, "tempo_rl_agreed", False)


class DataParallelGroup:
    def __init__(self):
        """Joins the torchrun group (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from the environment)."""
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
            backend = "cuda:nccl,cpu:gloo"
        else:
            self.device = torch.device("cpu")
            backend = "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend)
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.commands = dist.new_group(backend="gloo", timeout=COMMAND_TIMEOUT)

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def send(self, obj: Any) -> None:
        """Rank 0: hands `obj` (picklable) to every other rank."""
        dist.broadcast_object_list([obj], src=0, group=self.commands)

    def receive(self) -> Any:
        """Another rank: the next object rank 0 sends."""
        box = [None]
        dist.broadcast_object_list(box, src=0, group=self.commands)
        return box[0]

    def share(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        box = [obj if self.is_rank0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def from_rank0(self, fn: Callable[[], T]) -> T:
        """`fn()` run on rank 0 alone, its result (or its exception, raised everywhere) on every rank."""
        result, error = None, None
        if self.is_rank0:
            try:
                result = fn()
            except Exception as err:  # handed to every rank below
                error = err
        result, error = self.share((result, error))
        if error is not None:
            raise mark_agreed(error)
        return result

    def agreed(self, fn: Callable[[], T]) -> T:
        """`fn()` on every rank; if it fails on any, the first failure (by rank) is raised on all."""
        result, error = None, None
        try:
            result = fn()
        except Exception as err:
            error = err
        errors = self.gather(error)
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise mark_agreed(first)
        return result

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def all_true(self, flag: bool) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    def max_int(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def barrier(self) -> None:
        dist.barrier()
