"""Atomic checkpoints: `run_dir/checkpoints/step-<N:06d>/`, written under a temporary name in the same
directory and renamed, so a crash leaves either the whole checkpoint or none.

A checkpoint is also a Hugging Face model directory (config, `model.safetensors`, tokenizer and
processor files copied from the base model), so an engine can reload its weights straight from it."""
from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch

META = "meta.json"
PRUNED = ".pruned"
# Files of the base model directory that make a checkpoint loadable on its own (tokenizer, processor,
# chat template); the weights and config come from save_pretrained.
_SKIP_FROM_BASE = {"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json"}


class CheckpointPruned(FileNotFoundError):
    """A committed step whose weights run.keep_checkpoints removed: they never come back, so no retry helps."""


class CheckpointMissing(FileNotFoundError):
    """Step N was asked for while step N−1 was never committed: the run and the trainer disagree, which
    no retry mends (the workflow commits steps in order)."""


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def is_committed(path: str | Path) -> bool:
    return (Path(path) / META).is_file()


def is_pruned(path: str | Path) -> bool:
    return (Path(path) / PRUNED).is_file()


def read_meta(path: str | Path) -> dict:
    return json.loads((Path(path) / META).read_text())


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
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save_checkpoint(run_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    *, weight_version: int, data_cursor: dict, metrics: dict, base_model_path: str | Path,
                    extra: dict | None = None) -> Path:
    """Commit step N (`extra` goes into meta.json: the sample refs consumed, the optimizer step count).
    If step N is already committed (a concurrent or earlier attempt), keep that one. meta.json is strict
    JSON (no NaN or Infinity, which the TypeScript side cannot parse): the caller drops such metrics."""
    final = checkpoint_dir(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    if is_committed(final):
        return final
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        write_tied_lm_head(model, tmp)
        base = Path(base_model_path)
        for f in base.iterdir():
            if (f.is_file() and f.name not in _SKIP_FROM_BASE and not f.name.startswith(".")
                    and not f.name.endswith((".safetensors", ".bin", ".pt"))):
                shutil.copy2(f, tmp / f.name)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(capture_rng(), tmp / "rng.pt")
        meta = {"step": step, "weight_version": weight_version, "data_cursor": data_cursor, "metrics": metrics,
                "base_model_path": str(base_model_path), **(extra or {})}
        (tmp / META).write_text(json.dumps(meta, indent=1, allow_nan=False))
        _fsync_tree(tmp)
        os.rename(tmp, final)  # atomic on one filesystem; fails if another attempt won the race
    except OSError:
        if is_committed(final):
            shutil.rmtree(tmp, ignore_errors=True)
            return final
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return final


def write_tied_lm_head(model: torch.nn.Module, out: Path) -> None:
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
    from .model import load_policy

    path = Path(path)
    if not is_committed(path):
        raise FileNotFoundError(f"no committed checkpoint at {path}")
    model = load_policy(path, device=device, dtype=dtype)
    optimizer_state = torch.load(path / "optimizer.pt", map_location=device, weights_only=True)
    rng_state = torch.load(path / "rng.pt", weights_only=False)
    return LoadedCheckpoint(model, optimizer_state, rng_state, read_meta(path))


def remove_stale_temporaries(run_dir: str | Path) -> None:
    """Half-written checkpoints of crashed attempts (never renamed): safe to delete at load time."""
    root = Path(run_dir) / "checkpoints"
    if root.is_dir():
        for p in root.glob(".tmp-step-*"):
            shutil.rmtree(p, ignore_errors=True)


def optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """How many optimizer.step() calls this state has seen (Adam-style per-parameter `step`)."""
    for st in optimizer.state.values():
        if "step" in st:
            return int(st["step"])
    return 0


def prune_checkpoints(run_dir: str | Path, keep: int) -> list[Path]:
    """Drops the weights and optimizer state of all but the newest `keep` committed checkpoints (0: keep
    all). meta.json stays: a pruned step still counts as committed (exactly once) and keeps its audit
    (the sample refs it consumed); only the last one is ever loaded again."""
    if keep <= 0:
        return []
    root = Path(run_dir) / "checkpoints"
    done = sorted((p for p in root.glob("step-*") if is_committed(p)), key=lambda p: int(p.name[len("step-"):]))
    pruned = []
    for p in done[:-keep]:
        files = [f for f in p.iterdir() if f.name not in (META, PRUNED)]
        if not files:
            continue
        for f in files:
            shutil.rmtree(f) if f.is_dir() else f.unlink()
        (p / PRUNED).write_text("weights and optimizer state removed (run.keep_checkpoints)\n")
        pruned.append(p)
    return pruned
