"""Temporal activities of the trainer task queue: train_step, sync_weights, log_metrics.

Synchronous activities (run in the worker's thread pool): the work is PyTorch and blocking HTTP.
sync_weights fails only when no engine took the new version (weights/sync.py: an engine that failed is
labelled unusable and tried again at the next sync). train_step, sync_weights and log_metrics
heartbeat from a side thread all along (step/heartbeat.py), so a
short heartbeat timeout detects a dead trainer without cutting a long checkpoint load, save, engine
reload or W&B start.
The SDK delivers a cancellation by raising inside the thread; the training is shielded from that and
checks `activity.is_cancelled()` between micro-batches instead, so a step is never interrupted half
way through its optimizer step or its checkpoint commit.

Retries: an error that a retry cannot fix fails the activity at once (non-retryable ApplicationError,
type = the exception's class name): a payload or sample that breaks the contract, weights that
run.keep_checkpoints pruned or a step
asked for before the one it follows was committed, CUDA out of memory (the same batch would run out again). Everything else —
other OSErrors (a transient filesystem error), engine errors — is raised as is and retried. A step
whose blob store this worker does not reach is refused before any work, retryably (BlobRootUnreachable:
another worker may reach it)."""

from __future__ import annotations

import os
from pathlib import Path

import pydantic
import torch
from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from tempo_common.blobs import (
    BlobError,
    BlobRootUnreachable,
    check_blob_store,
    parse_blob_store_uri,
)
from ..checkpoint import atomic as ckpt
from ..checkpoint.atomic import CheckpointCorrupt, CheckpointMissing, CheckpointPruned
from ..stores.checkpoints import engine_weights_location, is_location, parse_location
from ..contract import SyncWeightsInput, SyncWeightsOutput, TrainStepInput, TrainStepOutput
from ..step.grpo import ContractError
from ..step.heartbeat import Heartbeater
from ..model.policy import SampleInvalid
from ..step.train_step import StepCancelled, Trainer
from ..weights.ipc import IpcLoader
from ..weights.sync import DirectoryLoader, sleep_engines, sync_weights_phased
from .metrics_sink import LogMetricsInput, log_metrics

# Errors that a retry cannot fix: fail the activity at once instead of retrying forever.
NON_RETRYABLE = (
    SampleInvalid,
    BlobError,
    pydantic.ValidationError,
    ContractError,
    CheckpointPruned,
    CheckpointMissing,
    CheckpointCorrupt,
)


class TemporalProgress:
    def heartbeat(self, details: dict) -> None:
        activity.heartbeat(details)

    def is_cancelled(self) -> bool:
        return activity.is_cancelled()


def _non_retryable(err: Exception, hint: str = "") -> ApplicationError:
    return ApplicationError(f"{type(err).__name__}: {hint}{err}", type=type(err).__name__, non_retryable=True)


def _parse(model: type[pydantic.BaseModel], payload: dict):
    """A payload that breaks the contract fails at once: retrying cannot fix it."""
    try:
        return model.model_validate(payload)
    except pydantic.ValidationError as err:
        raise _non_retryable(err) from err


def release_cached_gpu_memory() -> None:
    """Hands the blocks PyTorch's allocator keeps cached back to the GPU, for engines that share it."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def default_scratch_dir() -> Path:
    return Path(os.environ.get("TEMPO_RL_CACHE") or Path.home() / ".cache" / "tempo-rl") / "trainer-scratch"


class TrainerActivities:
    def __init__(self, trainer: Trainer, blob_store: str | None = None, scratch_dir: str | Path | None = None):
        """`blob_store`: the blob store (URI or directory) of this worker's stack, --blob-store (None: any
        that this machine reaches). `scratch_dir`: where this host keeps its copy of runs whose store is remote
        (stores/checkpoints.py); with a local store a run's directory is the one its plan names."""
        self.trainer = trainer
        self.blob_store = blob_store
        self.scratch_dir = Path(scratch_dir) if scratch_dir is not None else default_scratch_dir()

    def _run_dir(self, store_uri: str | None, run_id: str, planned: str) -> str:
        remote = store_uri is not None and parse_blob_store_uri(store_uri)[0] != "local"
        return str(self.scratch_dir / "runs" / run_id) if remote else planned

    @activity.defn(name="train_step")
    def train_step(self, payload: dict) -> dict:
        inp = None
        try:
            inp = TrainStepInput.model_validate(payload)
            check_blob_store(inp.blob_store, self.blob_store)
            inp = inp.model_copy(update={"run_dir": self._run_dir(inp.blob_store, inp.run_id, inp.run_dir)})
            slept = self._sleep_engines(inp)
            with activity.shield_thread_cancel_exception():
                out: TrainStepOutput = self.trainer.train_step(inp, TemporalProgress())
            if slept is not None:
                out = out.model_copy(update={"metrics": {**out.metrics, "perf/engine_sleep_seconds": slept}})
            if (stored := self.trainer.stored_run(inp.blob_store, inp.run_id, inp.run_dir)) is not None:
                out = out.model_copy(update={"checkpoint": stored.location_of(out.checkpoint)})
        except StepCancelled as err:
            raise CancelledError(str(err)) from err
        except BlobRootUnreachable as err:
            activity.logger.error("train_step refused: %s", err)
            raise ApplicationError(str(err), type="BlobRootUnreachable") from err
        except NON_RETRYABLE as err:
            raise _non_retryable(err) from err
        except torch.cuda.OutOfMemoryError as err:
            budget = f" (now {inp.hyper.micro_batch_tokens})" if inp is not None else ""
            raise _non_retryable(
                err, f"the trainer ran out of GPU memory; lower grpo.micro_batch_tokens{budget} and resume the run. "
            ) from err
        activity.logger.info("train_step done", extra={"step": out.step, "already_committed": out.already_committed})
        return out.model_dump()

    def _sleep_engines(self, inp: TrainStepInput) -> float | None:
        """engines.colocate: the engines on the trainer's GPUs give their memory back before it trains."""
        if not inp.sleep_engines:
            return None
        seconds, errors = sleep_engines(inp.sleep_engines, inp.engine_sleep_level)
        if errors:
            activity.logger.error("engines that share the trainer's GPUs did not go to sleep: %s", errors)
        return seconds

    @activity.defn(name="sync_weights")
    def sync_weights(self, payload: dict) -> dict:
        inp = _parse(SyncWeightsInput, payload)
        with Heartbeater(TemporalProgress()) as beat:
            beat.heartbeat({"phase": "weights", "checkpoint": inp.checkpoint, "transport": inp.transport})
            try:
                out = self._sync_ipc(inp, beat) if inp.transport == "ipc" else self._sync_disk(inp, beat)
            except StepCancelled as err:
                raise CancelledError(str(err)) from err
            except NON_RETRYABLE as err:
                raise _non_retryable(err) from err
        failed = [e for e in out.engines if not e.ok]
        message = "weight sync failed on " + "; ".join(f"{e.url}: {e.error}" for e in failed)
        if failed and len(failed) == len(out.engines):
            # Retryable (bounded by the workflow's policy): a retry re-syncs every engine, idempotently.
            raise ApplicationError(message, out.model_dump(), type="EngineSyncError")
        if failed:
            # The others serve the version; the failed ones are labelled unusable until the next sync.
            activity.logger.error(
                "%s; %d of %d engines serve version %d",
                message,
                len(out.engines) - len(failed),
                len(out.engines),
                out.weight_version,
            )
        return out.model_dump()

    def _sync_disk(self, inp: SyncWeightsInput, beat: Heartbeater) -> SyncWeightsOutput:
        weights = self._engine_weights(inp.checkpoint, beat)
        return sync_weights_phased(
            inp, DirectoryLoader(weights), heartbeat=beat.heartbeat, before_kv_wake=release_cached_gpu_memory
        )

    def _sync_ipc(self, inp: SyncWeightsInput, beat: Heartbeater) -> SyncWeightsOutput:
        """The weights from the trainer's memory (weights/ipc.py): the model of the checkpoint's step."""
        checkpoint = inp.checkpoint
        if is_location(checkpoint):  # an s3:// store: the step's local copy in this host's scratch run
            store, run_id, _, step = parse_location(checkpoint)
            stored = self.trainer.stored_run(store, run_id, self._run_dir(store, run_id, ""))
            stored.hydrate(step)
            checkpoint = str(ckpt.checkpoint_dir(stored.run_dir, step))
        release_cached_gpu_memory()  # woken engines take the memory the trainer's cache holds
        dtype = getattr(torch, inp.engine_dtype)
        with self.trainer.ipc_source(checkpoint, dtype, inp.ipc_bucket_mb * 2**20, beat) as source:
            loader = IpcLoader(source, dtype, inp.ipc_bucket_mb * 2**20, mode=inp.ipc_load)
            return sync_weights_phased(inp, loader, heartbeat=beat.heartbeat, before_kv_wake=release_cached_gpu_memory)

    def _engine_weights(self, checkpoint: str, progress) -> str:
        """What the engines load: a local model directory, or the store location they pull it from."""
        if not is_location(checkpoint):
            return self.trainer.engine_weights(checkpoint, progress)
        store, run_id, kind, step = parse_location(checkpoint)
        try:
            check_blob_store(store, self.blob_store)
        except BlobRootUnreachable as err:
            raise ApplicationError(str(err), type="BlobRootUnreachable") from err
        stored = self.trainer.stored_run(store, run_id, self._run_dir(store, run_id, ""))
        if kind != "checkpoints" or stored is None:
            raise BlobError(f"sync_weights takes a checkpoint's location, not {checkpoint!r}")
        return engine_weights_location(self.trainer, stored, step, progress)

    @activity.defn(name="log_metrics")
    def log_metrics(self, payload: dict) -> dict:
        inp = _parse(LogMetricsInput, payload)
        inp = inp.model_copy(update={"run_dir": self._run_dir(self.blob_store, inp.run_id, inp.run_dir)})
        with Heartbeater(TemporalProgress()):
            return log_metrics(inp).model_dump()

    def all(self) -> list:
        return [self.train_step, self.sync_weights, self.log_metrics]
