"""Metric sinks beyond the JSON lines the rollout worker writes: TensorBoard event files (always,
under <run_dir>/tensorboard) and Weights & Biases when WANDB_API_KEY is set and wandb is installed.
Idempotent per step: TensorBoard readers keep the last value written for a (tag, step)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

log = logging.getLogger("trainer.metrics")


class LogMetricsInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    run_dir: str
    step: int
    metrics: dict[str, float]


class LogMetricsOutput(BaseModel):
    tensorboard: str
    wandb: bool


_writers: dict[str, object] = {}
_wandb_runs: dict[str, object] = {}


def _tensorboard(run_dir: str):
    from torch.utils.tensorboard import SummaryWriter  # the tensorboard package's event-file writer

    if run_dir not in _writers:
        _writers[run_dir] = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
    return _writers[run_dir]


def _wandb(run_id: str):
    if not os.environ.get("WANDB_API_KEY"):
        return None
    try:
        import wandb  # optional: `uv pip install wandb` where it is wanted
    except ImportError:
        log.warning("WANDB_API_KEY is set but wandb is not installed; skipping W&B")
        return None
    if run_id not in _wandb_runs:
        _wandb_runs[run_id] = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "tempo-rl"), id=run_id, name=run_id, resume="allow"
        )
    return _wandb_runs[run_id]


def log_metrics(inp: LogMetricsInput) -> LogMetricsOutput:
    writer = _tensorboard(inp.run_dir)
    for key, value in inp.metrics.items():
        writer.add_scalar(key, value, global_step=inp.step)
    writer.flush()
    run = _wandb(inp.run_id)
    if run is not None:
        run.log(dict(inp.metrics), step=inp.step)
    return LogMetricsOutput(tensorboard=str(Path(inp.run_dir) / "tensorboard"), wandb=run is not None)
