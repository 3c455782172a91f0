"""Atomic checkpoints: `run_dir/checkpoints/step-<N:06d>/`, written under a temporary name in the same
directory and renamed, so a crash leaves either the whole checkpoint or none.

Fencing between attempts of one step (a timed-out attempt may still run beside its retry, in this
process or another): each attempt writes its own temporary directory, named by the step and the
attempt's token; the rename onto step-N is the commit and only one can succeed (a directory cannot be
renamed onto a non-empty one); meta.json, the commit record, is the last file written and carries
the token and the list of files, so the attempt reads back who won and checks that step-N is whole.
A loser removes only its own temporary directory and never touches step-N.

A checkpoint is also a Hugging Face model directory (config, `model.safetensors`, tokenizer and
processor files copied from the base model), so an engine can reload its weights straight from it.

Where the commit happens beyond the local rename is the caller's: a `RemoteCommit` (a remote store's,
stores/checkpoints.py) is handed in; this format knows no store."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

# Re-exported: defined beside the commit record, which engines check too (they import no trainer code).
from tempo_common.commit_records import CheckpointCorrupt as CheckpointCorrupt

from ..kill_points import process_kill_points
from ..model.moe_layout import to_checkpoint_layout

META = "meta.json"
PRUNED = ".pruned"
_TMP_PREFIX = ".tmp-"
# A background checkpoint's files while they are written (upgrade_to_full).
_FULL_PREFIX = ".full-"
# Files of the base model directory that make a checkpoint loadable on its own (tokenizer, processor,
# chat template); the weights and config come from save_pretrained.
# Files of the base model directory a checkpoint does not take over: what save_pretrained writes, and
# the commit record of a base that is itself a checkpoint (a run started from another run's step).
_SKIP_FROM_BASE = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "meta.json",
}


class RemoteCommit(Protocol):
    """Where a step is committed besides the local directory (a remote store's run: stores/checkpoints.py's
    StoredRun). `kind` is "checkpoints" here."""

    def record(self, kind: str, step: int) -> dict | None:
        """The commit record that won step N, or None while none is there."""

    def publish(self, kind: str, step: int, local: Path, meta: dict) -> dict:
        """Uploads an attempt's files and commits its record if none is there; returns the winner's record."""

    def materialize(self, step: int, record: dict) -> Path:
        """The local copy of a committed step (its files unless light or pruned, and meta.json)."""


class CheckpointPruned(FileNotFoundError):
    """A committed step whose weights run.keep_checkpoints removed: they never come back, so no retry helps."""


class CheckpointMissing(FileNotFoundError):
    """Step N was asked for while step N−1 was never committed: the run and the trainer disagree, which
    no retry mends (the workflow commits steps in order)."""


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def temporary_dir(run_dir: str | Path, step: int, attempt: str) -> Path:
    final = checkpoint_dir(run_dir, step)
    return final.parent / f"{_TMP_PREFIX}{final.name}-{attempt}"


def _step_of_temporary(path: Path, prefix: str = _TMP_PREFIX) -> int | None:
    step = path.name[len(prefix + "step-") :].split("-", 1)[0]
    return int(step) if step.isdigit() else None


def is_committed(path: str | Path) -> bool:
    return (Path(path) / META).is_file()


def is_pruned(path: str | Path) -> bool:
    return (Path(path) / PRUNED).is_file()


def read_meta(path: str | Path) -> dict:
    return json.loads((Path(path) / META).read_text())


def write_meta(path: str | Path, meta: dict) -> None:
    (Path(path) / META).write_text(json.dumps(meta, indent=1, allow_nan=False))


def capture_rng() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(root: Path) -> None:
    for p in [*root.rglob("*"), root]:
        _fsync(p)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer | None,
    *,
    weight_version: int,
    data_cursor: dict,
    metrics: dict,
    base_model_path: str | Path,
    extra: dict | None = None,
    write_files: Callable[[Path], None] | None = None,
    store: RemoteCommit | None = None,
) -> Path:
    """Commit step N (`extra` goes into meta.json: the sample refs consumed, the optimizer step count,
    the `attempt` token that names this attempt's temporary directory). If step N is already committed
    (a concurrent or earlier attempt), keep that one: the caller tells whose commit it is by meta.json's
    `attempt`. meta.json is strict JSON (no NaN or Infinity, which the TypeScript side cannot parse):
    the caller drops such metrics.

    model None: a light commit (run.checkpoint_interval) — the record only, `"full": false`; the state
    after it is rebuilt from the last full checkpoint by replaying the recorded steps (step/replay.py).
    write_files: writes a full checkpoint's files into the attempt's directory instead (a sharded
    trainer's: sharded.py).
    store: the run's remote store (stores/checkpoints.py), where the commit then happens: the attempt is
    written here, published, and renamed into place only if its record won."""
    final = checkpoint_dir(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    if is_committed(final):
        return final
    if store is not None and (won := store.record("checkpoints", step)) is not None:
        return store.materialize(step, won)
    extra = {"attempt": uuid.uuid4().hex, **(extra or {})}
    tmp = temporary_dir(run_dir, step, extra["attempt"])
    try:
        t0 = time.perf_counter()
        if write_files is not None:
            write_files(tmp)
        elif model is not None:
            _write_checkpoint_files(tmp, model, optimizer, base_model_path)
        else:
            tmp.mkdir()
        metrics = {**metrics, "perf/checkpoint_seconds": time.perf_counter() - t0}  # the files' write
        meta = {
            "step": step,
            "weight_version": weight_version,
            "data_cursor": data_cursor,
            "metrics": metrics,
            "base_model_path": str(base_model_path),
            **extra,
            "full": model is not None or write_files is not None,
            "files": manifest(tmp),
        }
        write_meta(tmp, meta)  # the commit record, last
        _fsync_tree(tmp)
        process_kill_points().reach("checkpoint_commit", "start")
        if store is not None and (won := store.publish("checkpoints", step, tmp, meta))["attempt"] != meta["attempt"]:
            shutil.rmtree(tmp, ignore_errors=True)
            return store.materialize(step, won)
        os.rename(tmp, final)  # the commit: atomic on one filesystem; fails once another attempt committed
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_committed(final):
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(final.parent)
    process_kill_points().reach("checkpoint_commit", "end")
    check_complete(final)
    remove_dead_temporaries(run_dir)
    return final


def _write_checkpoint_files(
    out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, base_model_path: str | Path
) -> None:
    write_model_dir(out, model, base_model_path)
    save_torch(optimizer.state_dict(), out / "optimizer.pt")
    save_torch(capture_rng(), out / "rng.pt")


def save_torch(obj, path: Path) -> None:
    """torch.save without the zip records' CRC-32 where this torch can skip it: computing it runs at
    about 1 GB/s, most of the time of an optimizer state of gigabytes, and torch.load does not check it
    (a committed file's integrity is its size in the commit record and the fsync before the commit)."""
    config = getattr(getattr(torch.utils, "serialization", None), "config", None)
    save = getattr(config, "save", None)
    if save is None or not hasattr(save, "compute_crc32"):
        torch.save(obj, path)
        return
    was = save.compute_crc32
    save.compute_crc32 = False
    try:
        torch.save(obj, path)
    finally:
        save.compute_crc32 = was


def upgrade_to_full(run_dir: str | Path, step: int, attempt: str, write_files: Callable[[Path], None]) -> float | None:
    """Makes committed light step N a full checkpoint, in place (a background checkpoint: the step was
    committed as a light step at once, its state kept in host memory). The files are written into
    `.full-step-N-<attempt>/` beside it, fsynced, moved into step-N, and the commit record replaced by
    one that lists them (`"full": true`) with one atomic rename: that rename is the upgrade's commit.
    Until it lands step N is light (a crash replays it from the previous full checkpoint); files moved
    in before it are not in the record, so they are ignored. Only the attempt whose record won the step
    upgrades it: returns the seconds the upgrade took, or None when the step is not that attempt's light
    step (already full, or committed by another attempt)."""
    final = checkpoint_dir(run_dir, step)
    meta = read_meta(final)
    if meta.get("attempt") != attempt or meta.get("full", True):
        return None
    tmp = final.parent / f"{_FULL_PREFIX}{final.name}-{attempt}"
    t0 = time.perf_counter()
    try:
        write_files(tmp)
        files = manifest(tmp)
        _fsync_tree(tmp)
        for name in files:
            (final / name).parent.mkdir(parents=True, exist_ok=True)
            os.rename(tmp / name, final / name)
        _fsync(final)
        meta = {k: v for k, v in meta.items() if k != "full_pending"}
        record = final / f".{META}.upgrade-{attempt}"
        record.write_text(json.dumps({**meta, "full": True, "files": files}, indent=1, allow_nan=False))
        _fsync(record)
        os.replace(record, final / META)  # the upgrade's commit
        _fsync(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    check_complete(final)
    return time.perf_counter() - t0


def write_model_dir(
    out: Path, model: torch.nn.Module, base_model_path: str | Path, state_dict: dict[str, torch.Tensor] | None = None
) -> None:
    """state_dict: the full weights when `model` is sharded (sharded.full_model_state)."""
    if state_dict is not None:  # a tied weight once, under its first name, as save_pretrained writes it
        names = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
        state_dict = {k: v for k, v in state_dict.items() if k in names}
    # a copy: transformers 5's save_pretrained empties the dict it is given as it writes (measured on
    # the 2B shape), and the tied LM head below is read from it
    model.save_pretrained(out, safe_serialization=True, state_dict=None if state_dict is None else dict(state_dict))
    # fused MoE experts back in the layout vLLM reads (save_pretrained writes transformers' own; a no-op
    # for dense models)
    to_checkpoint_layout(out)
    write_tied_lm_head(model, out, state_dict)
    for f in Path(base_model_path).iterdir():
        if (
            f.is_file()
            and f.name not in _SKIP_FROM_BASE
            and not f.name.startswith(".")
            and not f.name.endswith((".safetensors", ".bin", ".pt"))
        ):
            shutil.copy2(f, out / f.name)


def is_full(path: str | Path) -> bool:
    """A committed step that holds weights and optimizer state (checkpoints from before
    run.checkpoint_interval were all full)."""
    return read_meta(path).get("full", True)


def weights_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "weights" / f"step-{step:06d}"


def export_weights(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    base_model_path: str | Path,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """The engines' copy of a light step's weights (a model directory, no optimizer): derived, not
    durable — renamed into place whole, never fsynced, rebuilt by replay if lost; only the newest is kept."""
    out = weights_dir(run_dir, step)
    if out.is_dir():
        return out
    tmp = out.parent / f"{_TMP_PREFIX}{out.name}-{uuid.uuid4().hex}"
    try:
        write_model_dir(tmp, model, base_model_path, state_dict)
        os.rename(tmp, out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not out.is_dir():
            raise
    for old in out.parent.iterdir():
        if old.name != out.name and not old.name.startswith(_TMP_PREFIX):
            shutil.rmtree(old, ignore_errors=True)
    return out


def manifest(root: Path) -> dict[str, int]:
    return {str(f.relative_to(root)): f.stat().st_size for f in sorted(root.rglob("*")) if f.is_file()}


def check_complete(path: str | Path) -> None:
    """Every file the commit record lists is there, at its size (a pruned step keeps only its record;
    checkpoints from before the list was recorded are taken as they are)."""
    path = Path(path)
    listed = read_meta(path).get("files")
    if listed is None or is_pruned(path):
        return
    bad = sorted(n for n, size in listed.items() if not (path / n).is_file() or (path / n).stat().st_size != size)
    if bad and not is_pruned(path):  # prune marks a step before it deletes anything
        raise CheckpointCorrupt(f"committed checkpoint {path} lacks or has truncated files: {', '.join(bad)}")


def write_tied_lm_head(model: torch.nn.Module, out: Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """Also write a tied LM head as its own tensor (`lm_head.safetensors`).

    save_pretrained drops a tied lm_head.weight. vLLM 0.32's in-place reload (reload_weights) then
    updates embed_tokens but never re-processes the LM head layer; on CPU that layer keeps its own
    prepacked GEMM copy of the *old* weights, so the engine silently samples from a stale head
    (the parity test caught a 0.003 mean |Δlogprob| from exactly this). Naming the head explicitly
    makes vLLM load — and re-pack — it. Transformers ignores the extra file (no index) or re-ties it."""
    from safetensors.torch import save_file

    text_cfg = getattr(model.config, "text_config", model.config)
    if not (getattr(model.config, "tie_word_embeddings", False) or getattr(text_cfg, "tie_word_embeddings", False)):
        return
    if state_dict is not None:
        name = next(n for n, p in model.named_parameters() if p is model.get_output_embeddings().weight)
        head = state_dict[name].detach().contiguous().cpu()
    else:
        head = model.get_output_embeddings().weight.detach().contiguous().cpu()
    save_file({"lm_head.weight": head}, out / "lm_head.safetensors", metadata={"format": "pt"})
    index = out / "model.safetensors.index.json"
    if index.is_file():  # sharded: vLLM only reads the files the index names
        doc = json.loads(index.read_text())
        doc["weight_map"]["lm_head.weight"] = "lm_head.safetensors"
        index.write_text(json.dumps(doc, indent=2))


@dataclass
class LoadedCheckpoint:
    model: torch.nn.Module
    optimizer_state: dict
    rng_state: dict
    meta: dict


def load_checkpoint(path: str | Path, device, dtype: torch.dtype) -> LoadedCheckpoint:
    from ..model.policy import load_policy

    path = Path(path)
    if not is_committed(path):
        raise FileNotFoundError(f"no committed checkpoint at {path}")
    check_complete(path)
    model = load_policy(path, device=device, dtype=dtype)
    if (path / "optimizer.pt").is_file():
        optimizer_state = torch.load(path / "optimizer.pt", map_location=device, weights_only=True)
    else:  # written by a sharded (data-parallel) trainer
        from .sharded import plain_optimizer_state

        optimizer_state = plain_optimizer_state(path, model)
    rng_state = torch.load(path / "rng.pt", weights_only=False)
    return LoadedCheckpoint(model, optimizer_state, rng_state, read_meta(path))


def remove_dead_temporaries(run_dir: str | Path) -> list[Path]:
    """Removes the temporary directories of attempts that can no longer commit, and only those."""
    root = Path(run_dir) / "checkpoints"
    removed = []
    for p in root.glob(f"{_TMP_PREFIX}step-*"):
        step = _step_of_temporary(p, _TMP_PREFIX)
        # Dead = its step is committed: its rename onto the non-empty step-N must fail, so deleting it cannot reach step-N.
        if step is not None and is_committed(checkpoint_dir(run_dir, step)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    newest_full = max(
        (int(p.name[len("step-") :]) for p in root.glob("step-*") if is_committed(p) and is_full(p)), default=-1
    )
    for p in root.glob(f"{_FULL_PREFIX}step-*"):
        # A background write is dead once its step is full or a newer step is (its upgrade would bring
        # nothing back). Deleting one still running (a process that lost its step's lock) fails that
        # upgrade before its record is replaced: the step stays light.
        step = _step_of_temporary(p, _FULL_PREFIX)
        if step is not None and step <= newest_full:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """How many optimizer.step() calls this state has seen (Adam-style per-parameter `step`)."""
    for st in optimizer.state.values():
        if "step" in st:
            return int(st["step"])
    return 0


def prune_checkpoints(run_dir: str | Path, keep: int, keep_every: int = 0) -> list[Path]:
    """Drops the weights and optimizer state of all but the newest `keep` full checkpoints (0: keep
    all) and those of steps N with (N + 1) a multiple of `keep_every`. meta.json stays: a pruned step
    still counts as committed (exactly once) and keeps its audit (the sample refs it consumed); only
    the newest is ever loaded again."""
    if keep <= 0:
        return []
    root = Path(run_dir) / "checkpoints"
    done = sorted(
        (p for p in root.glob("step-*") if is_committed(p) and is_full(p)), key=lambda p: int(p.name[len("step-") :])
    )
    pruned = []
    for p in done[:-keep]:
        if keep_every > 0 and (int(p.name[len("step-") :]) + 1) % keep_every == 0:
            continue
        files = [f for f in p.iterdir() if f.name not in (META, PRUNED)]
        if not files:
            continue
        (p / PRUNED).write_text("weights and optimizer state removed (run.keep_checkpoints)\n")
        for f in files:
            shutil.rmtree(f) if f.is_dir() else f.unlink()
        pruned.append(p)
    return pruned
