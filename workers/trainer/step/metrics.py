"""A step's metrics: read off the device once per update, and kept JSON-safe."""

from __future__ import annotations

import math

import torch


def read_metrics(
    sums: dict[str, torch.Tensor | float], grad_norm: torch.Tensor | None = None
) -> tuple[dict[str, float], float | None]:
    """The update's device-side metrics (and its gradient norm) as floats: the update's one device→host sync."""
    names = [k for k, v in sums.items() if isinstance(v, torch.Tensor)]
    head = [] if grad_norm is None else [grad_norm.float()]
    device = grad_norm.device if grad_norm is not None else next((sums[k].device for k in names), None)
    values = torch.stack([*head, *(sums[k].float().to(device) for k in names)]).tolist() if head or names else []
    metrics = {k: float(v) for k, v in sums.items() if k not in names}
    return {**metrics, **dict(zip(names, values[len(head) :], strict=False))}, values[0] if head else None


def finite_metrics(metrics: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    """(the finite metrics, the names of those dropped): JSON, and so Temporal and meta.json, has no NaN."""
    kept = {k: float(v) for k, v in metrics.items() if math.isfinite(v)}
    return kept, sorted(k for k in metrics if k not in kept)
