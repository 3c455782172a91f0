"""Host → device copies that do not wait for the GPU.

`tensor.to("cuda")` from ordinary (pageable) host memory waits until every kernel already queued on
the stream has finished (PyTorch synchronises the stream after the copy): at the start of a
micro-batch that is the whole backward pass of the one before, and the host then prepares the rest of
the inputs (M-RoPE positions, the packed row, the images) while the GPU has nothing to do. From
pinned memory the copy is queued behind that work instead and the host goes on (the pinned block is
kept until the copy has run: PyTorch's host allocator records it on the stream).
TEMPO_RL_PINNED_COPIES=0 copies as `.to()` does (to compare)."""

from __future__ import annotations

import os

import torch


def to_device(t: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`t` on `device` (as `dtype`), the same values as `t.to(device, dtype)`, without a host wait on a GPU."""
    if device.type == "cuda" and t.device.type == "cpu" and os.environ.get("TEMPO_RL_PINNED_COPIES", "1") != "0":
        return t.pin_memory().to(device, dtype=dtype, non_blocking=True)
    return t.to(device, dtype=dtype)
