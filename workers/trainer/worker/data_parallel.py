"""Data parallelism over the ranks of a torchrun group (model.num_gpus > 1): FSDP2 (model/sharding.py).

Rank 0 alone is the Temporal worker and keeps everything that makes a step exactly once: the trainer's
lock, heartbeats, the "already committed?" check, the commit's atomic rename. For a step it does train,
it sends the step's input to the other ranks (`follow`), and from there every rank runs the same code
(Trainer's, with the overrides below) in step:
- rank 0 reads the samples' lengths and plans the step: each update batch (grpo.ppo_mini_batches) is
  cut into one share per rank, balanced by token count (longest sample first, to the lightest rank);
  each rank loads and prepares its own share from the blob store (a path every node mounts);
- the loss is normalised over the whole update batch — its samples and loss-mask tokens over all
  ranks (accumulate_gradients' `totals`) — and FSDP sums the gradients, so loss, gradients and update
  equal those of one process on the whole batch (up to float summation order);
- the decisions stay common: the state to load, whether to skip a non-finite update, cancellation
  (honoured between updates, not micro-batches: a rank that stopped alone would leave the others in
  a collective), whether rank 0's commit won;
- metrics are summed over ranks once, at the end of the step (each rank's are already its part of
  the batch-wide weighted sums).

Checkpoints: checkpoint/sharded.py (DCP plus the full model directory, written by rank 0)."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from tempo_common import weight_buckets

from ..checkpoint import atomic as ckpt
from ..step import replay
from ..checkpoint import sharded as sharded_checkpoint
from ..model import sharding
from tempo_common.blobs import open_blob_store
from ..contract import Sample, TrainStepInput, TrainStepOutput
from .dp_group import DataParallelGroup, is_agreed, mark_agreed
from ..model.policy import TrainSample, load_policy, micro_batches
from ..step.metrics import read_metrics
from ..step.token_logprobs import TokenLogprobs
from ..step.gradients import (
    NoProgress,
    Progress,
    StepCancelled,
    accumulate_gradients,
    make_optimizer,
    set_hyper,
    update_batches,
    with_old_logprobs,
)
from ..step.train_step import Trainer, TrainerState
from ..weights.ipc import BucketPacker, Buckets, bucket_plan, engine_tensors, packed_buckets

log = logging.getLogger("trainer.worker")
T = TypeVar("T")


@dataclass
class StepPlan:
    # Per distinct update batch (ppo_epochs repeat them), per rank: indices into the step's samples.
    shares: list[list[list[int]]]
    # Per distinct update batch: (samples, loss-mask tokens) of the whole batch.
    totals: list[tuple[int, int]]
    counts: dict[str, float]

    def indices_of(self, rank: int) -> list[int]:
        return sorted(i for batch in self.shares for i in batch[rank])


def plan_step(inp: TrainStepInput, lengths: list[tuple[int, int]], world_size: int) -> StepPlan:
    """lengths: (tokens, loss-mask tokens) of each sample of the step."""
    index = list(range(len(inp.samples)))
    batches = (
        [index] if inp.algorithm == "sft" else update_batches(index, inp.hyper.model_copy(update={"ppo_epochs": 1}))
    )
    shares, totals = [], []
    for batch in batches:
        share: list[list[int]] = [[] for _ in range(world_size)]
        load = [0] * world_size
        for i in sorted(batch, key=lambda i: -lengths[i][0]):
            r = min(range(world_size), key=lambda r: (load[r], r))
            share[r].append(i)
            load[r] += lengths[i][0]
        shares.append([sorted(s) for s in share])
        totals.append((len(batch), sum(lengths[i][1] for i in batch)))
    counts = {
        "train/n_samples": float(len(index)),
        "train/n_tokens": float(sum(t for t, _ in lengths)),
        "train/n_response_tokens": float(sum(m for _, m in lengths)),
    }
    return StepPlan(shares, totals, counts)


def read_lengths(inp: TrainStepInput) -> list[tuple[int, int]]:
    blobs = open_blob_store(inp.blob_store)
    out = []
    try:
        for ref in inp.samples:
            s = Sample.model_validate(blobs.get_json(ref.ref))
            out.append((len(s.prompt_ids) + len(s.response_ids), int(sum(s.loss_mask))))
    finally:
        blobs.close()
    return out


class _CancelBetweenUpdates:
    """Heartbeats through; cancellation is checked by every rank together between updates instead."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def heartbeat(self, details: dict) -> None:
        self.progress.heartbeat(details)

    def is_cancelled(self) -> bool:
        return False


class DataParallelTrainer(Trainer):
    def __init__(self, group: DataParallelGroup, dtype: torch.dtype = torch.float32):
        # its commit is collective (every rank writes its shards), inside the step
        super().__init__(device=group.device, dtype=dtype, background_checkpoints=False)
        self.group = group
        self._plan: StepPlan | None = None

    def _in_step(self, fn: Callable[[], T]) -> T:
        """Runs a part that every rank runs together. A failure every rank shares is raised; any other
        on rank 0 leaves the ranks out of step: the process ends and torchrun ends the group."""
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # activity threads start on device 0
        try:
            return fn()
        except BaseException as err:
            if is_agreed(err) or not self.group.is_rank0:
                raise
            log.critical("a data-parallel step failed on rank 0 alone; ending the trainer group", exc_info=True)
            logging.shutdown()
            os._exit(1)

    # --- entry points: rank 0 sends the command, then every rank runs it ------------------------------

    def _train_uncommitted(self, inp: TrainStepInput, progress: Progress) -> TrainStepOutput:
        if self.group.is_rank0:
            self.group.send(("train_step", inp.model_dump(mode="json")))
        return self._in_step(lambda: super(DataParallelTrainer, self)._train_uncommitted(inp, progress))

    def engine_weights(self, checkpoint: str, progress: Progress = NoProgress()) -> str:
        light = replay.light_step_of(checkpoint)
        if light is None or ckpt.weights_dir(*light).is_dir():
            return super().engine_weights(checkpoint, progress)
        with self._locked(progress, light[1]):
            self.group.send(("engine_weights", checkpoint))
            return self._in_step(lambda: self.export_light_step(checkpoint, progress))

    def export_light_step(self, checkpoint: str, progress: Progress) -> str:
        run_dir, step = self.group.from_rank0(lambda: replay.light_step_of(checkpoint))
        recorded = self.group.from_rank0(lambda: replay.recorded_input(run_dir, step))
        state = self.ensure_state(recorded.model_copy(update={"step": step + 1, "run_dir": str(run_dir)}), progress)
        weights = sharded_checkpoint.full_model_state(state.model)
        if not self.group.is_rank0:
            return ""
        return str(ckpt.export_weights(run_dir, step, state.model, recorded.model_path, state_dict=weights))

    # --- the ipc transport: every rank packs the full weights on its own GPU -------------------------

    @contextmanager
    def ipc_source(
        self, checkpoint: str, dtype: torch.dtype, capacity_bytes: int, progress: Progress = NoProgress()
    ) -> Iterator[Callable[[], Buckets]]:
        with self._locked(progress, -1):

            def rank0() -> Buckets:
                self.group.send(
                    (
                        "ipc_buckets",
                        {
                            "checkpoint": checkpoint,
                            "dtype": weight_buckets.dtype_name(dtype),
                            "capacity": capacity_bytes,
                        },
                    )
                )
                return self._in_step(lambda: self.ipc_buckets(checkpoint, dtype, capacity_bytes, progress))

            yield rank0

    def ipc_buckets(self, checkpoint: str, dtype: torch.dtype, capacity_bytes: int, progress: Progress) -> Buckets:
        """Every rank: the weights gathered from the shards a tensor at a time and packed on this rank's
        GPU; each bucket's handles gathered from all ranks, and a barrier once rank 0 has posted it."""
        model = self._model_at(checkpoint, progress)
        packer = BucketPacker(self.device, bucket_plan(model, dtype, capacity_bytes))

        def exchange(mine: dict[str, list]) -> dict[str, list]:
            merged: dict[str, list] = {}
            for handles in self.group.gather(mine):
                merged |= handles
            return merged

        full = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t  # noqa: E731
        return Buckets(packed_buckets(packer, engine_tensors(model, gather=full), exchange), packer, self.group.barrier)

    def _model_at(self, checkpoint: str, progress: Progress) -> torch.nn.Module:
        committed = self.group.from_rank0(lambda: replay.committed_step_of(checkpoint))
        if committed is None:
            s = self.state
            if self.group.all_true(s is not None and s.step == -1 and s.model_path == checkpoint):
                return s.model
            return sharding.shard_policy(load_policy(checkpoint, self.device, self.dtype))
        run_dir, step = committed
        recorded = self.group.from_rank0(lambda: replay.recorded_input(run_dir, step))
        return self.ensure_state(
            recorded.model_copy(update={"step": step + 1, "run_dir": str(run_dir)}), progress
        ).model

    # --- the state at step N−1 ------------------------------------------------------------------------

    def ensure_state(self, inp: TrainStepInput, progress: Progress = NoProgress()) -> TrainerState:
        want = inp.step - 1
        s = self.state
        kept = s is not None and s.run_id == inp.run_id and s.step == want and s.model_path == inp.model_path

        def decide() -> tuple[bool, int]:
            if kept:
                return True, -1
            full = replay.newest_full_step(inp.run_dir, want) if want >= 0 else -1
            if full >= 0:
                ckpt.check_complete(ckpt.checkpoint_dir(inp.run_dir, full))
            return False, full

        keep, full = self.group.from_rank0(decide)
        if keep:
            if not kept:
                raise RuntimeError(f"rank {self.group.rank} does not hold the state rank 0 keeps (step {want})")
            return s
        self.state = None
        model, optimizer = self._load(inp, full)
        state = TrainerState(inp.run_id, full, inp.model_path, model, optimizer, self._vision(model, inp.model_path))
        for step in range(full + 1, want + 1):
            progress.heartbeat({"phase": "replaying", "step": step, "from_full_checkpoint": full})
            self._apply(state, self.group.from_rank0(lambda: replay.recorded_input(inp.run_dir, step)), progress)
            state.step = step
            self.replayed[0] += 1
            digest = replay.param_digest(model)
            if not replay.digests_match(
                digest, self.group.from_rank0(lambda: replay.recorded_digest(inp.run_dir, step))
            ):
                self.replayed[1] += 1
        self.state = state
        return state

    def _load(self, inp: TrainStepInput, full: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """Every rank loads the whole weights (the base model's, or a checkpoint's model directory),
        then keeps its shards."""
        if full < 0:
            model = sharding.shard_policy(load_policy(inp.model_path, self.device, self.dtype))
            return model, make_optimizer(model, inp.hyper)
        path = ckpt.checkpoint_dir(inp.run_dir, full)
        model, optimizer = sharded_checkpoint.load_optimizer(
            path,
            load_policy(path, self.device, self.dtype),
            lambda m: make_optimizer(m, inp.hyper),
            sharding.shard_policy,
        )
        ckpt.restore_rng(torch.load(path / "rng.pt", weights_only=False))
        return model.train(), optimizer

    # --- a step's updates on this rank's share ----------------------------------------------------------

    def _apply(self, state: TrainerState, inp: TrainStepInput, progress: Progress, record: TokenLogprobs | None = None):
        """`record`: this rank's share of the samples' per-token logprobs (each rank writes its own)."""
        if not inp.samples:
            return {}, 0, 0, []
        progress.heartbeat({"phase": "loading_samples", "step": inp.step, "n": len(inp.samples)})
        plan = self.group.from_rank0(lambda: plan_step(inp, read_lengths(inp), self.group.world_size))
        self._plan = plan
        samples = self.group.agreed(lambda: self._load_share(inp, state, plan.indices_of(self.group.rank)))
        set_hyper(state.optimizer, inp.hyper)
        ref = self.reference_model(inp.model_path) if inp.hyper.kl.enabled and inp.algorithm != "sft" else None
        return (*self._sharded_updates(state, samples, plan, inp, progress, ref, record), list(samples.values()))

    def _load_share(self, inp: TrainStepInput, state: TrainerState, indices: list[int]) -> dict[int, TrainSample]:
        return dict(zip(indices, self.load_samples(inp, state, indices), strict=False))

    def _batch_counts(self, samples: list[TrainSample]) -> dict[str, float]:
        return dict(self._plan.counts)

    def _missing_passes(self, policy, samples: list[TrainSample], budget: int) -> int:
        """How many micro-batches this rank runs fewer than the rank with the most: asked before any
        runs (a rank still in its forwards would meet this collective with another)."""
        mine = len(micro_batches(policy, samples, budget))
        return self.group.max_int(mine) - mine

    def _idle_passes(self, policy: sharding.ShardedPolicy, n: int, backward: bool) -> None:
        for _ in range(n):
            sharding.idle_pass(policy, self.device, backward)

    def _sharded_updates(
        self,
        state: TrainerState,
        samples: dict[int, TrainSample],
        plan: StepPlan,
        inp: TrainStepInput,
        progress: Progress,
        ref,
        record: TokenLogprobs | None = None,
    ) -> tuple[dict[str, float], int, int]:
        """Trainer._updates over this rank's shares: the same updates, metrics and skips."""
        hyper, rank = inp.hyper, self.group.rank
        policy = sharding.ShardedPolicy(state.model)
        n_updates = len(plan.shares) * (1 if inp.algorithm == "sft" else hyper.ppo_epochs)
        if n_updates > 1:
            order = sorted(samples)
            mine = [samples[i] for i in order]
            missing = self._missing_passes(policy, mine, hyper.micro_batch_tokens)
            samples = dict(zip(order, with_old_logprobs(policy, mine, hyper, ref), strict=False))
            self._idle_passes(policy, missing, backward=False)
            sharding.reshard(state.model)
            if record is not None:
                record.add_old(samples.values())
                record = None
        sums: dict[str, float] = {}
        norms: list[float] = []
        skipped = 0
        for u in range(n_updates):
            if not self.group.all_true(not progress.is_cancelled()):
                raise mark_agreed(StepCancelled(f"cancelled before update {u}/{n_updates}"))
            j = u % len(plan.shares)
            batch = [samples[i] for i in plan.shares[j][rank]]
            state.optimizer.zero_grad(set_to_none=True)
            missing = self._missing_passes(policy, batch, hyper.micro_batch_tokens)
            got, _ = read_metrics(
                accumulate_gradients(
                    policy,
                    batch,
                    hyper,
                    _CancelBetweenUpdates(progress),
                    ref_model=ref,
                    algorithm=inp.algorithm,
                    totals=plan.totals[j],
                    record=record,
                )
            )
            self._idle_passes(policy, missing, backward=True)
            state.step = -2
            norms.append(sharding.grad_norm(state.model, hyper.grad_clip))
            if self.group.all_true(math.isfinite(norms[-1]) and math.isfinite(got.get("train/loss", 0.0))):
                state.optimizer.step()
            else:
                skipped += 1
            for k, v in got.items():
                sums[k] = sums.get(k, 0.0) + (v if k == "train/n_micro_batches" else v / n_updates)
        state.optimizer.zero_grad(set_to_none=True)
        total: dict[str, float] = {}
        for part in self.group.gather(sums):
            for k, v in part.items():
                total[k] = total.get(k, 0.0) + v
        total["train/grad_norm"] = sum(norms) / len(norms)
        return total, n_updates - skipped, skipped

    # --- the commit: rank 0's, with every rank's shards ----------------------------------------------

    def _commit(
        self, inp: TrainStepInput, state: TrainerState, metrics: dict[str, float], applied: bool, progress: Progress
    ) -> TrainStepOutput | None:
        progress.heartbeat({"phase": "committing", "step": inp.step})
        full = replay.is_full_step(inp)
        digest = replay.param_digest(state.model)
        if not self.group.is_rank0:
            tmp = self.group.receive() if full else None
            if tmp is not None:
                self._write_files(Path(tmp), state, inp.model_path)
            if self.group.receive():
                state.step = inp.step
                self.replayed = [0, 0]
            else:
                self.state = None
            return None
        written: list[Path] = []

        def write(tmp: Path) -> None:
            self.group.send(str(tmp))
            written.append(tmp)
            self._write_files(tmp, state, inp.model_path)

        out = self._save_commit(inp, state, metrics, applied, digest, **({"write_files": write} if full else {}))
        if full and not written:
            self.group.send(None)  # committed by another attempt first: nothing to write
        self.group.send(not out.already_committed)
        return out

    def _write_files(self, out: Path, state: TrainerState, base_model_path: str) -> None:
        weights = sharded_checkpoint.full_model_state(state.model)
        sharded_checkpoint.save_sharded(out, state.model, state.optimizer)
        if self.group.is_rank0:
            ckpt.write_model_dir(out, state.model, base_model_path, weights)
            torch.save(ckpt.capture_rng(), out / "rng.pt")
        self.group.barrier()


def follow(group: DataParallelGroup, trainer: DataParallelTrainer) -> None:
    """A rank other than 0: runs rank 0's commands until it sends None (its worker stopped)."""
    while (command := group.receive()) is not None:
        op, arg = command
        try:
            if op == "train_step":
                trainer._train_uncommitted(TrainStepInput.model_validate(arg), NoProgress())
            elif op == "engine_weights":
                trainer.export_light_step(arg, NoProgress())
            elif op == "ipc_buckets":
                sent = trainer.ipc_buckets(
                    arg["checkpoint"], weight_buckets.DTYPES[arg["dtype"]], arg["capacity"], NoProgress()
                )
                try:
                    for _ in sent.descs:
                        sent.after_each()
                finally:
                    sent.packer.close()
            else:
                raise RuntimeError(f"unknown command {op!r} from rank 0")
        except Exception as err:
            if not is_agreed(err):
                raise
            log.info("the step failed on every rank", extra={"rank": group.rank, "error": repr(err)})
