"""Checkpoints of a data-parallel trainer (world size > 1), inside atomic.py's atomic commit.

A full checkpoint holds, in the attempt's temporary directory:
- `dcp/`: model and optimizer state, sharded, written by every rank (torch.distributed.checkpoint);
- the Hugging Face model directory (config, `model.safetensors`, tokenizer…), written by rank 0 from
  the full state dict gathered to its CPU: the engines reload their weights from it, and every world
  size — 1 included — loads the weights from it;
- `rng.pt` (rank 0's).

Any world size resumes from either format: a world-size-1 trainer reads the optimizer from `dcp/`
without a process group (`plain_optimizer_state`); a sharded trainer reads the single-process
`optimizer.pt` by keying it by parameter name first (`load_optimizer`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

DCP_DIR = "dcp"
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def is_sharded(path: str | Path) -> bool:
    return (Path(path) / DCP_DIR).is_dir()


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on rank 0's CPU (empty on the other ranks); every rank must call it."""
    return get_model_state_dict(model, options=_FULL)


def save_sharded(out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of the model and optimizer state under out/dcp (collective)."""
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
    dcp.save(state, checkpoint_id=out / DCP_DIR)


def load_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Reads path/dcp into the sharded model and optimizer, whatever the world size that wrote it."""
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
    dcp.load(state, checkpoint_id=path / DCP_DIR)
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def load_optimizer(
    path: Path,
    model: torch.nn.Module,
    make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer],
    shard: Callable[[torch.nn.Module], torch.nn.Module],
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """`model` (loaded whole from path's weights, not sharded yet) sharded, with its optimizer state
    from `path` in either format."""
    if is_sharded(path):
        model = shard(model)
        optimizer = make_optimizer(model)
        load_sharded(path, model, optimizer)
        return model, optimizer
    # Single-process optimizer.pt: keyed by parameter position, which means nothing once sharded;
    # keyed by parameter name (full tensors) first, then cut into this rank's shards.
    plain = make_optimizer(model)
    plain.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True))
    by_name = get_optimizer_state_dict(model, plain, options=StateDictOptions(full_state_dict=True))
    del plain
    model = shard(model)
    optimizer = make_optimizer(model)
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))
    return model, optimizer


def plain_optimizer_state(path: Path, model: torch.nn.Module) -> dict:
    """The optimizer state of a sharded checkpoint as a single process's `optimizer.state_dict()`
    for `model` (whole, loaded from path's weights); no process group needed."""
    from ..contract import Hyper
    from ..step.gradients import make_optimizer

    optimizer = make_optimizer(model, Hyper())
    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    dcp.load(state, checkpoint_id=path / DCP_DIR)
    set_optimizer_state_dict(model, optimizer, state["optimizer"])
    return optimizer.state_dict()
