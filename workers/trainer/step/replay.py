"""Light steps and their replay (run.checkpoint_interval k > 1).

A full checkpoint (weights, optimizer state, RNG) is written when (N + 1) is a multiple of k and at the
run's last step; every other step commits only its record — meta.json under the same atomic, fenced
commit as a full one, holding the step's whole input (sample refs with rewards and group ids, the
hyper-parameters of that step, the data cursor), its metrics, the weight version and a digest of the
weights after the update. Exactly once is unchanged: a step is done when its record is committed.

After a crash the trainer rebuilds the state of step N from the newest full checkpoint F ≤ N and
re-applies steps F+1..N from their records: the same samples (read back from the blob store), the
same advantages, the same updates — no new rollouts. The rebuilt weights' digest is compared with
the recorded one: equal on CPU (deterministic kernels); a difference (non-deterministic GPU kernels)
is counted in `train/replay_mismatches`, not fatal. The cost: up to k − 1 steps of training to
recover, against a checkpoint write saved on k − 1 of every k steps.

An engine needs a light step's weights as a model directory: the sync exports them from the trainer's
memory on demand (checkpoint.export_weights), rebuilding the state by replay if the trainer restarted.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ..checkpoint import atomic as ckpt
from ..contract import TrainStepInput


def is_full_step(inp: TrainStepInput) -> bool:
    return inp.checkpoint_interval == 1 or inp.full_checkpoint or (inp.step + 1) % inp.checkpoint_interval == 0


def param_digest(model: torch.nn.Module) -> list[float] | None:
    """[Σw, Σw²] over every parameter, in float64: cheap, and any update changes it. Sharded parameters
    (worker/data_parallel.py) are summed over their shards, a collective: every rank calls it."""
    from torch.distributed.tensor import DTensor

    def whole(t: torch.Tensor) -> torch.Tensor:
        return t.full_tensor() if isinstance(t, DTensor) else t

    sums = []
    with torch.no_grad():
        for p in model.parameters():
            d = p.double()  # one float64 copy per parameter, for both sums (the same values as two copies)
            sums.append(torch.stack([whole(d.sum()), whole(d.square().sum())]))
    # read off the device once, then added up in the parameters' order, in Python floats as always
    total = squares = 0.0
    for s, q in torch.stack(sums).tolist() if sums else []:
        total += s
        squares += q
    return [total, squares] if math.isfinite(total) and math.isfinite(squares) else None


def digests_match(a: list[float] | None, b: list[float] | None) -> bool:
    return a is not None and b is not None and all(x == y for x, y in zip(a, b, strict=False))


def newest_full_step(run_dir: str | Path, upto: int) -> int:
    """The newest step ≤ upto with a full checkpoint (−1: none, start from the base model)."""
    for step in range(upto, -1, -1):
        path = ckpt.checkpoint_dir(run_dir, step)
        if not ckpt.is_committed(path):
            raise ckpt.CheckpointMissing(f"step {upto + 1} needs step {step}'s record, which is not committed: {path}")
        if ckpt.is_full(path):
            if ckpt.is_pruned(path):
                raise ckpt.CheckpointPruned(
                    f"step {upto + 1} needs step {step}'s weights, which run.keep_checkpoints"
                    f" pruned: {path} (keep more checkpoints than run.steps_per_workflow_run)"
                )
            return step
    return -1


def recorded_input(run_dir: str | Path, step: int) -> TrainStepInput:
    meta = ckpt.read_meta(ckpt.checkpoint_dir(run_dir, step))
    if "replay" not in meta:
        raise ckpt.CheckpointCorrupt(f"light step {step} of {run_dir} has no replay record")
    return TrainStepInput.model_validate(meta["replay"])


def recorded_digest(run_dir: str | Path, step: int) -> list[float] | None:
    return ckpt.read_meta(ckpt.checkpoint_dir(run_dir, step)).get("param_digest")


def committed_step_of(checkpoint: str | Path) -> tuple[Path, int] | None:
    """(run_dir, step) when `checkpoint` is a committed step (light or full); None for anything else
    (a model directory)."""
    path = Path(checkpoint)
    if not (path.name.startswith("step-") and path.parent.name == "checkpoints" and ckpt.is_committed(path)):
        return None
    return path.parent.parent, int(path.name[len("step-") :])


def light_step_of(checkpoint: str | Path) -> tuple[Path, int] | None:
    """(run_dir, step) when `checkpoint` is a committed light step's record; None for anything else
    (a full checkpoint, a model directory)."""
    step = committed_step_of(checkpoint)
    return None if step is None or ckpt.is_full(Path(checkpoint)) else step
