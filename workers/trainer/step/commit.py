"""A step's commit (train_step.py's Trainer): its record, and a full checkpoint's files written inside
the step or in the background (checkpoint/background.py).

A full step (run.checkpoint_interval) is written in the background when the trainer holds its state on
a GPU (TEMPO_RL_BACKGROUND_CHECKPOINTS=1 or 0 decides instead), its run's checkpoints commit in a local
directory (an s3:// store commits a record that names the files: written inside the step) and it is not
the run's last step (`full_checkpoint`: the run's result is a model directory, there when the step
returns). Such a step commits as a light step at once and becomes full when its files land; until then
a crash replays it from the previous full checkpoint."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import TYPE_CHECKING

import torch

from ..checkpoint import atomic as ckpt
from ..checkpoint.background import BackgroundCheckpoints, take_snapshot, write_snapshot
from ..contract import TrainStepInput, TrainStepOutput
from . import replay
from .gradients import Progress
from .metrics import finite_metrics

if TYPE_CHECKING:
    from .train_step import TrainerState


def background_wanted(device: torch.device, choice: bool | None) -> bool:
    if choice is not None:
        return choice
    env = os.environ.get("TEMPO_RL_BACKGROUND_CHECKPOINTS")
    return env != "0" if env is not None else device.type == "cuda"


class Commits:
    """The commit half of the Trainer (needs its `state`, `replayed` and `stored_run`)."""

    def _init_commits(self, device: torch.device, background: bool | None) -> None:
        self.background = (
            BackgroundCheckpoints(pinned=device.type == "cuda") if background_wanted(device, background) else None
        )
        self._prune_lock = threading.Lock()

    def _in_background(self, inp: TrainStepInput) -> bool:
        return (
            self.background is not None
            and not inp.full_checkpoint
            and self.stored_run(inp.blob_store, inp.run_id, inp.run_dir) is None
        )

    def _commit(
        self, inp: TrainStepInput, state: TrainerState, metrics: dict[str, float], applied: bool, progress: Progress
    ) -> TrainStepOutput:
        """Commit step N from the in-memory state, or return the step N another attempt committed first."""
        progress.heartbeat({"phase": "committing", "step": inp.step})
        full = replay.is_full_step(inp)
        digest = replay.param_digest(state.model)
        if self.background is not None:
            metrics = dict(metrics)
            if full:  # one full checkpoint at a time (and the host copy is reused)
                metrics["perf/checkpoint_wait_seconds"] = self.background.wait()
            metrics.update(self.background.metrics())  # the writes finished since the last step
        if not (full and self._in_background(inp)):
            files = {"model": state.model, "optimizer": state.optimizer} if full else {}
            return self._save_commit(inp, state, metrics, applied, digest, **files)
        t0 = time.perf_counter()
        snapshot = take_snapshot(state.model, state.optimizer, self.background.buffers)
        metrics["perf/checkpoint_snapshot_seconds"] = time.perf_counter() - t0
        metrics["perf/checkpoint_host_gib"] = self.background.buffers.nbytes / 2**30
        attempt = uuid.uuid4().hex
        out = self._save_commit(inp, state, metrics, applied, digest, attempt=attempt, full_pending=True)
        if not out.already_committed:
            model = state.model
            self.background.start(
                inp.run_dir,
                inp.step,
                attempt,
                lambda tmp: write_snapshot(tmp, snapshot, model, inp.model_path),
                after=lambda: self._prune(inp),
            )
        return out

    def _prune(self, inp: TrainStepInput) -> None:
        with self._prune_lock:  # the background writer prunes too, once its step is full
            ckpt.prune_checkpoints(inp.run_dir, inp.keep_checkpoints, inp.keep_checkpoint_every)

    def _save_commit(
        self,
        inp: TrainStepInput,
        state: TrainerState,
        metrics: dict[str, float],
        applied: bool,
        digest: list[float] | None,
        attempt: str | None = None,
        full_pending: bool = False,
        **files,
    ) -> TrainStepOutput:
        """The commit itself (`files`: what a full checkpoint writes, save_checkpoint's arguments;
        full_pending: a light record whose files a background write adds)."""
        metrics, dropped = finite_metrics(
            {
                **metrics,
                "train/replayed_steps": float(self.replayed[0]),
                "train/replay_mismatches": float(self.replayed[1]),
            }
        )
        # Whose commit won is told by a token of this attempt, not by comparing metrics (timings differ
        # between attempts, and NaN != NaN made an attempt disown its own commit).
        attempt = attempt or uuid.uuid4().hex
        weight_version = inp.step + 1
        stored = self.stored_run(inp.blob_store, inp.run_id, inp.run_dir)
        path = ckpt.save_checkpoint(
            inp.run_dir,
            inp.step,
            files.pop("model", None),
            files.pop("optimizer", None),
            weight_version=weight_version,
            data_cursor=inp.data_cursor.model_dump(),
            metrics=metrics,
            base_model_path=inp.model_path,
            extra={
                "sample_refs": [s.ref for s in inp.samples],
                "optimizer_steps": ckpt.optimizer_steps(state.optimizer),
                "update_applied": applied,
                "nonfinite_metrics": dropped,
                "attempt": attempt,
                "replay": inp.model_dump(mode="json"),
                "param_digest": digest,
                **({"full_pending": True} if full_pending else {}),
            },
            store=stored,
            **files,
        )
        recorded = ckpt.read_meta(path)
        if recorded.get("attempt") != attempt:
            # Another attempt committed step N first: that one is the truth; reload it next time.
            self.state = None
            return TrainStepOutput(
                step=inp.step,
                weight_version=recorded["weight_version"],
                checkpoint=str(path),
                already_committed=True,
                metrics=finite_metrics(recorded["metrics"])[0],
            )
        state.step = inp.step
        self.replayed = [0, 0]
        self._prune(inp)
        if stored is not None:
            stored.prune(inp.keep_checkpoints, inp.keep_checkpoint_every)
        # the step's metrics as recorded (with the checkpoint's own write time, perf/checkpoint_seconds)
        return TrainStepOutput(
            step=inp.step,
            weight_version=weight_version,
            checkpoint=str(path),
            already_committed=False,
            metrics=finite_metrics(recorded["metrics"])[0],
        )
