"""run.deterministic on the trainer's side (docs/certification.md): a step trains with PyTorch's
deterministic algorithms (an op that has none fails the step, naming itself) from a generator seeded by
(run seed, step), so a retried step — in this process, a standby or a restarted trainer — computes
the same weights bit for bit. On CUDA the cuBLAS workspace must be fixed before the first kernel:
supervise/trainer-process.ts starts every trainer with CUBLAS_WORKSPACE_CONFIG set (CUBLAS_WORKSPACE, its
value; a Python entry point that trains deterministically sets it itself)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch

CUBLAS_WORKSPACE = ":4096:8"


def step_seed(run_seed: int, step: int) -> int:
    digest = hashlib.sha256(f"{run_seed}|{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


@contextmanager
def deterministic_step(enabled: bool, run_seed: int, step: int) -> Iterator[None]:
    if not enabled:
        yield
        return
    was = torch.are_deterministic_algorithms_enabled()
    cudnn = torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(step_seed(run_seed, step))
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)
        torch.backends.cudnn.benchmark = cudnn
