"""One GRPO step, exactly once.

The model lives in the worker process between steps (`Trainer`). Step N:
1. step N's checkpoint already committed → return its recorded metrics, train nothing;
2. otherwise make sure the in-memory state is step N−1's (the newest full checkpoint, or the base
   model, brought forward by replaying the light steps after it: replay.py) — after a crash, or after
   an attempt that failed between its optimizer step and its commit;
3. forward/backward by micro-batches (cancellation honoured between them), the optimizer updates,
   commit step N atomically (checkpoint/atomic.py: each attempt in its own temporary directory, one rename
   wins; with an s3:// store one conditional put of the commit record wins: stores/checkpoints.py) — a
   full checkpoint every run.checkpoint_interval steps (on a GPU written after the step returns:
   commit.py), the step's record otherwise.
   The updates themselves are gradients.py's.
4. the attempt whose commit won writes each trained sample's per-token logprobs beside the sample
   (token_logprobs.py, for the UI); an attempt that lost writes none.

A side thread heartbeats all along (heartbeat.py), through the phases without progress points of
their own: waiting for the trainer's lock, loading a checkpoint or the samples, saving.

Old logprobs: each step makes one optimizer step on fresh rollouts and every micro-batch runs before
it, so the policy that scores the batch *is* the pre-update policy: old logprobs are the trainer's own
(detached) logprobs from the same forward pass, as in vime/slime, which recompute them. The PPO ratio
is therefore 1 at the step's start and the engine/trainer mismatch is measured
(train_rollout_logprob_abs_diff) and optionally corrected by TIS against the rollout logprobs.

Non-finite steps: if the loss or the gradient norm of step N is NaN or infinite, the optimizer step is
skipped (gradients dropped; model and optimizer stay exactly as at step N−1) and step N is still
committed, once, with `train/nonfinite_step` 1 (0 on every other step) and `update_applied: false` in
meta.json. Its samples count as consumed (`sample_refs`) and are not retrained: the run moves on, and
checkpoint N holds step N−1's weights. Metrics are JSON numbers only: a non-finite metric is dropped
from `metrics` and its name listed in meta.json's `nonfinite_metrics`."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint import atomic as ckpt
from . import replay
from tempo_common.blobs import canonical_blob_store_uri, open_blob_store, parse_blob_store_uri
from ..stores.checkpoints import StoredRun
from ..contract import Sample, TrainStepInput, TrainStepOutput
from .gradients import (
    NoProgress,
    Progress,
    StepCancelled,
    accumulate_gradients,  # noqa: F401 (re-exported)
    make_optimizer,
    set_hyper,
    update_batches,
    with_old_logprobs,
)
from .grpo import ContractError, group_advantages
from .determinism import deterministic_step
from .commit import Commits
from .heartbeat import Heartbeater
from ..model.policy import TrainSample, VisionProcessor, load_policy, pick_device, prepare_sample
from .memory import StepMemory, training_allocator
from .token_logprobs import TokenLogprobs
from .metrics import finite_metrics, read_metrics
from ..weights.ipc import Buckets


# How often a step waiting for the trainer's lock checks whether it was cancelled.
LOCK_POLL_S = 1.0


@dataclass
class TrainerState:
    run_id: str
    step: int  # the last step applied to `model` (−1: the base model)
    model_path: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    vision: VisionProcessor | None


class Trainer(Commits):
    """Holds the model between steps; one step at a time per process."""

    def __init__(
        self,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        background_checkpoints: bool | None = None,
    ):
        """background_checkpoints: full checkpoints written after the step returns (commit.py; None: on a GPU)."""
        self.device = torch.device(device) if device is not None else pick_device()
        self.dtype = dtype
        self._init_commits(self.device, background_checkpoints)
        self.lock = threading.Lock()
        self.state: TrainerState | None = None
        self._ref_model: tuple[str, torch.nn.Module] | None = None
        # Light steps re-applied (and how many ended off their recorded weights) since the last commit.
        self.replayed = [0, 0]
        self._stored: dict[tuple[str, str, str], StoredRun] = {}

    def stored_run(self, store_uri: str, run_id: str, run_dir: str | Path) -> StoredRun | None:
        """The run's checkpoints in a remote store (None: a local store, where they commit in run_dir)."""
        if parse_blob_store_uri(store_uri)[0] == "local":
            return None
        key = (canonical_blob_store_uri(store_uri), run_id, str(run_dir))
        if key not in self._stored:
            self._stored[key] = StoredRun(open_blob_store(store_uri), run_id, run_dir)
        return self._stored[key]

    @staticmethod
    def _vision(model, model_path: str) -> VisionProcessor | None:
        cfg = model.config
        return VisionProcessor(model_path, cfg) if hasattr(cfg, "vision_config") else None

    def ensure_state(self, inp: TrainStepInput, progress: Progress = NoProgress()) -> TrainerState:
        """In-memory state at step N−1 of this run: kept, or loaded from the newest full checkpoint
        (the base model before any) and brought forward by replaying the light steps after it."""
        want = inp.step - 1
        s = self.state
        if s is not None and s.run_id == inp.run_id and s.step == want and s.model_path == inp.model_path:
            return s
        self.state = None  # drop the old model before loading another
        full = replay.newest_full_step(inp.run_dir, want) if want >= 0 else -1
        if full < 0:
            model = load_policy(inp.model_path, self.device, self.dtype)
            optimizer = make_optimizer(model, inp.hyper)
        else:
            loaded = ckpt.load_checkpoint(ckpt.checkpoint_dir(inp.run_dir, full), self.device, self.dtype)
            model = loaded.model.train()
            optimizer = make_optimizer(model, inp.hyper)
            optimizer.load_state_dict(loaded.optimizer_state)
            ckpt.restore_rng(loaded.rng_state)
        state = TrainerState(inp.run_id, full, inp.model_path, model, optimizer, self._vision(model, inp.model_path))
        for step in range(full + 1, want + 1):
            progress.heartbeat({"phase": "replaying", "step": step, "from_full_checkpoint": full})
            recorded = replay.recorded_input(inp.run_dir, step)
            with deterministic_step(recorded.deterministic, recorded.seed, step):
                self._apply(state, recorded, progress)
            state.step = step
            self.replayed[0] += 1
            if not replay.digests_match(replay.param_digest(model), replay.recorded_digest(inp.run_dir, step)):
                self.replayed[1] += 1
        self.state = state
        return state

    def engine_weights(self, checkpoint: str, progress: Progress = NoProgress()) -> str:
        """A model directory an engine can reload for `checkpoint`: itself, unless it is a light step's
        record — then that step's weights, exported from memory (rebuilt by replay if need be)."""
        light = replay.light_step_of(checkpoint)
        if light is None:
            return checkpoint
        run_dir, step = light
        if self.background is not None:
            self.background.wait_for(run_dir, step)  # being written in the background: the full directory, soon
            if ckpt.is_full(checkpoint):
                return checkpoint
        if ckpt.weights_dir(run_dir, step).is_dir():
            return str(ckpt.weights_dir(run_dir, step))
        with self._locked(progress, step):
            recorded = replay.recorded_input(run_dir, step)
            state = self.ensure_state(recorded.model_copy(update={"step": step + 1, "run_dir": str(run_dir)}), progress)
            return str(ckpt.export_weights(run_dir, step, state.model, recorded.model_path))

    @contextmanager
    def model_for_sync(self, checkpoint: str, progress: Progress = NoProgress()) -> Iterator[torch.nn.Module]:
        """A model holding `checkpoint`'s weights, for the ipc transport to send, under the trainer's lock
        (no step moves it meanwhile): the in-memory state when it is that step's — as it is right after
        the step — else the state rebuilt (loaded, replayed); the base model for a model directory."""
        committed = replay.committed_step_of(checkpoint)
        with self._locked(progress, committed[1] if committed else -1):
            if committed is None:
                s = self.state
                yield (
                    s.model
                    if s is not None and s.step == -1 and s.model_path == checkpoint
                    else load_policy(checkpoint, self.device, self.dtype)
                )
                return
            run_dir, step = committed
            recorded = replay.recorded_input(run_dir, step)
            yield self.ensure_state(
                recorded.model_copy(update={"step": step + 1, "run_dir": str(run_dir)}), progress
            ).model

    @contextmanager
    def ipc_source(
        self, checkpoint: str, dtype: torch.dtype, capacity_bytes: int, progress: Progress = NoProgress()
    ) -> Iterator[Callable[[], Buckets]]:
        """What the ipc transport sends (weights/ipc.py's IpcLoader's source): `checkpoint`'s weights in buckets,
        the trainer locked meanwhile."""
        with self.model_for_sync(checkpoint, progress) as model:
            yield lambda: Buckets.of(model, dtype, capacity_bytes)

    def reference_model(self, model_path: str) -> torch.nn.Module:
        if self._ref_model is None or self._ref_model[0] != model_path:
            ref = load_policy(model_path, self.device, self.dtype).eval()
            ref.requires_grad_(False)
            self._ref_model = (model_path, ref)
        return self._ref_model[1]

    def train_step(self, inp: TrainStepInput, progress: Progress = NoProgress()) -> TrainStepOutput:
        with Heartbeater(progress) as beat, self._locked(beat, inp.step):
            return self._train_step(inp, beat)

    @contextmanager
    def _locked(self, progress: Progress, step: int) -> Iterator[None]:
        """The trainer's lock, waited for while heartbeating: a retry that the server gave up on (the
        cancellation comes back with a heartbeat) stops waiting and frees its worker thread."""
        progress.heartbeat({"phase": "waiting_for_trainer", "step": step})
        while not self.lock.acquire(timeout=LOCK_POLL_S):
            if progress.is_cancelled():
                raise StepCancelled(f"cancelled while waiting for the trainer (step {step})")
        try:
            yield
        finally:
            self.lock.release()

    def _train_step(self, inp: TrainStepInput, progress: Progress) -> TrainStepOutput:
        if (stored := self.stored_run(inp.blob_store, inp.run_id, inp.run_dir)) is not None:
            progress.heartbeat({"phase": "reading_store", "step": inp.step})
            stored.hydrate(inp.step)
        final = ckpt.checkpoint_dir(inp.run_dir, inp.step)
        if ckpt.is_committed(final):
            if ckpt.is_pruned(final):
                raise ckpt.CheckpointPruned(
                    f"step {inp.step} is committed but its weights were pruned"
                    f" (run.keep_checkpoints): {final}; the run resumed further back"
                    " than the checkpoints it keeps"
                )
            meta = ckpt.read_meta(final)
            return TrainStepOutput(
                step=inp.step,
                weight_version=meta["weight_version"],
                checkpoint=str(final),
                already_committed=True,
                metrics=finite_metrics(meta["metrics"])[0],
            )
        return self._train_uncommitted(inp, progress)

    def _train_uncommitted(self, inp: TrainStepInput, progress: Progress) -> TrainStepOutput:
        with deterministic_step(inp.deterministic, inp.seed, inp.step):
            return self._train_from_state(inp, progress)

    def _train_from_state(self, inp: TrainStepInput, progress: Progress) -> TrainStepOutput:
        memory = StepMemory(self.device).start()
        with training_allocator(self.device) as expandable:
            progress.heartbeat({"phase": "loading_state", "step": inp.step})
            state = self.ensure_state(inp, progress)
            t0 = time.perf_counter()
            record = TokenLogprobs() if inp.algorithm != "sft" else None
            sums, applied, skipped, samples = self._apply(state, inp, progress, record)
            seconds = time.perf_counter() - t0
        if not inp.samples:
            # Nothing to learn from (all failed or filtered): commit the step without an update so
            # the run's step, checkpoint and weight-version chain stays unbroken.
            metrics = {"train/skipped": 1.0, "train/n_samples": 0.0, "train/nonfinite_step": 0.0}
            return self._commit(inp, state, metrics, applied=False, progress=progress)
        counts = self._batch_counts(samples)
        metrics = {
            **sums,
            "train/updates": float(applied),
            "train/nonfinite_step": 1.0 if skipped else 0.0,
            "perf/train_tokens_per_second": counts["train/n_tokens"] / max(seconds, 1e-9),
            "perf/train_seconds": seconds,
            **counts,
            **memory.metrics(expandable),
        }
        out = self._commit(inp, state, metrics, applied=applied > 0, progress=progress)
        if record is not None and self.state is state and state.step == inp.step:
            self._write_token_logprobs(inp, record, progress)
        return out

    def _write_token_logprobs(self, inp: TrainStepInput, record: TokenLogprobs, progress: Progress) -> None:
        """Each trained sample's per-token logprobs beside it (token_logprobs.py), by the attempt whose
        commit won (it holds the committed state), after the commit: an attempt that lost writes none."""
        if record.by_name:
            progress.heartbeat({"phase": "writing_token_logprobs", "step": inp.step, "n": len(record.by_name)})
            record.write_to(inp.blob_store, inp.step)

    def _batch_counts(self, samples: list[TrainSample]) -> dict[str, float]:
        counts = {
            "train/n_samples": float(len(samples)),
            "train/n_tokens": float(sum(s.n_tokens for s in samples)),
            "train/n_response_tokens": float(sum(float(s.loss_mask.sum()) for s in samples)),
        }
        if any(s.routes is not None for s in samples):
            # rollout.routing_replay: the share of tokens the engine's experts routed (the rest: the trainer's router)
            routed = sum(int((s.routes[:, 0, 0] >= 0).sum()) for s in samples if s.routes is not None)
            counts["train/routing_replay_coverage"] = routed / max(counts["train/n_tokens"], 1.0)
        return counts

    def _apply(self, state: TrainerState, inp: TrainStepInput, progress: Progress, record: TokenLogprobs | None = None):
        """Step `inp`'s updates on `state` (a new step, or a recorded one replayed): (metrics, updates
        applied, updates skipped, the samples). `record`: collects the samples' per-token logprobs."""
        if not inp.samples:
            return {}, 0, 0, []
        progress.heartbeat({"phase": "loading_samples", "step": inp.step, "n": len(inp.samples)})
        samples = self.load_samples(inp, state)
        set_hyper(state.optimizer, inp.hyper)
        ref = self.reference_model(inp.model_path) if inp.hyper.kl.enabled and inp.algorithm != "sft" else None
        return (*self._updates(state, samples, inp, progress, ref, record), samples)

    def _updates(
        self,
        state: TrainerState,
        samples: list[TrainSample],
        inp: TrainStepInput,
        progress: Progress,
        ref,
        record: TokenLogprobs | None = None,
    ) -> tuple[dict[str, float], int, int]:
        """The step's optimizer updates (one, or grpo.ppo_mini_batches × ppo_epochs). An update whose loss
        or gradient norm is not finite is skipped. Returns the metrics (means over updates; counts
        summed), the updates applied and those skipped."""
        batches = [samples] if inp.algorithm == "sft" else update_batches(samples, inp.hyper)
        if len(batches) > 1:
            samples = with_old_logprobs(state.model, samples, inp.hyper, ref)
            batches = update_batches(samples, inp.hyper)
            if record is not None:
                record.add_old(samples)
                record = None
        sums: dict[str, float] = {}
        norms: list[float] = []
        skipped = 0
        for batch in batches:
            state.optimizer.zero_grad(set_to_none=True)
            got = accumulate_gradients(
                state.model, batch, inp.hyper, progress, ref_model=ref, algorithm=inp.algorithm, record=record
            )
            # From here on the in-memory model no longer matches any checkpoint until the commit.
            state.step = -2
            norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(), inp.hyper.grad_clip)
            got, norm = read_metrics(got, norm)
            norms.append(norm)
            if math.isfinite(norms[-1]) and math.isfinite(got.get("train/loss", 0.0)):
                state.optimizer.step()
            else:
                skipped += 1
            for k, v in got.items():
                sums[k] = sums.get(k, 0.0) + (v if k == "train/n_micro_batches" else v / len(batches))
        state.optimizer.zero_grad(set_to_none=True)
        sums["train/grad_norm"] = sum(norms) / len(norms)
        return sums, len(batches) - skipped, skipped

    def load_samples(
        self, inp: TrainStepInput, state: TrainerState, indices: list[int] | None = None
    ) -> list[TrainSample]:
        """The step's samples (those at `indices` only: a data-parallel rank's share), advantages computed
        over the whole step, whichever samples are loaded."""
        advantages = (
            torch.zeros(len(inp.samples))
            if inp.algorithm == "sft"
            else group_advantages(
                [s.reward for s in inp.samples], [s.group_id for s in inp.samples], dr_grpo=inp.hyper.dr_grpo
            )
        ).tolist()
        routing = replay_shape(state.model) if inp.hyper.routing_replay and inp.algorithm != "sft" else None
        processed: dict = {}  # each distinct image once (a group's samples share their prompt's)
        with closing(open_blob_store(inp.blob_store)) as blobs:
            return [
                prepare_sample(
                    Sample.model_validate(blobs.get_json(inp.samples[i].ref)),
                    advantages[i],
                    blobs,
                    state.vision,
                    routing=routing,
                    processed=processed,
                )
                for i in (range(len(inp.samples)) if indices is None else indices)
            ]


def replay_shape(model) -> tuple[int, int, int]:
    """(layers, top_k, experts) of the routing rows an MoE policy replays; a dense policy cannot replay."""
    from ..model.routing_replay import model_routing_shape

    shape = model_routing_shape(getattr(model, "module", model))
    if shape is None:
        raise ContractError(
            "rollout.routing_replay is on but the policy has no MoE layers (model.path must be an MoE model,"
            " e.g. `tempo-rl model tiny --moe`)"
        )
    return shape
