"""bench/trainer.py's product path: a Qwen3-VL trained by the worker's own Trainer, step after step, on
synthetic Geo3K-like samples (bench/trainer_samples.py), each step timed phase by phase.

The model: a public shape's config (generators/shaped_model.py, `--layers` for a shallower copy)
built in memory with random weights on the device — the same class, sizes and initialisation as the
generated model, without writing and reading 4 GB — and handed to a Trainer as its state at the base
model; or `--model DIR`, a model directory loaded as the worker loads it. From there every step is
Trainer.train_step: the samples read from a blob store and their images through the model's
processor, packed micro-batches, forward/backward, clipping, AdamW, the commit (a light record, or a
full checkpoint in the step or in the background, `--checkpoint`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from trainer.checkpoint import atomic as ckpt
from trainer.contract import Hyper, TrainStepInput
from trainer.generators import shaped_model
from trainer.model import image_features
from trainer.model.policy import for_training, micro_batches
from trainer.step.determinism import CUBLAS_WORKSPACE
from trainer.step.gradients import make_optimizer
from trainer.step.memory import LiveTensorBytes
from trainer.step.train_step import Trainer, TrainerState
from trainer_flops import vlm_flops
from trainer_phases import Phases, StepProgress
from trainer_samples import write_samples


def build_shape(shape: str, layers: int | None, base: Path, device: torch.device, seed: int):
    """(the model, its base directory): the shape's config and processor files written to `base`, the
    weights drawn on the device by transformers' own initialisation (normal(0, 0.02), as the generator)."""
    from transformers import Qwen3VLForConditionalGeneration

    config = shaped_model.write_config_dir(base, shaped_model.shape_spec(shape, layers))
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    return for_training(model.train()), base


def _hyper(args) -> Hyper:
    return Hyper(
        lr=1e-6,
        micro_batch_tokens=args.micro_batch_tokens,
        compute_dtype="bfloat16" if args.device == "cuda" else "float32",
        loss_agg="sample_mean",
    )


def _step_input(args, work: Path, base: Path, refs: list[dict], step: int, hyper: Hyper) -> TrainStepInput:
    last = step == args.steps - 1
    return TrainStepInput(
        run_id="bench",
        step=step,
        run_dir=str(work / "run"),
        blob_store=str(work / "blobs"),
        model_path=str(base),
        samples=refs,
        hyper=hyper,
        data_cursor={"epoch": 0, "cursor": step + 1},
        keep_checkpoints=1,  # a 2B full checkpoint is ~25 GB
        checkpoint_interval=args.checkpoint_interval if args.checkpoint != "none" else 10**9,
        full_checkpoint=last and args.checkpoint != "none" and args.last_step_full,
        deterministic=args.deterministic,
    )


def _drop_written_checkpoints(trainer: Trainer, run_dir: Path) -> None:
    """The files of the full checkpoints written so far, once measured (a 2B one is ~25 GB; the disk
    holds one at a time): outside the timed steps. Their records stay, marked pruned."""
    if trainer.background is not None:
        trainer.background.wait()
    for p in (run_dir / "checkpoints").glob("step-*"):
        if ckpt.is_committed(p) and ckpt.is_full(p) and not ckpt.is_pruned(p):
            (p / ckpt.PRUNED).write_text("bench\n")
            for f in p.iterdir():
                if f.name not in (ckpt.META, ckpt.PRUNED):
                    shutil.rmtree(f) if f.is_dir() else f.unlink()


def _checkpoint_kind(out_checkpoint: str, metrics: dict) -> str:
    if "perf/checkpoint_snapshot_seconds" in metrics:
        return "full-background"
    return "full-sync" if ckpt.is_full(out_checkpoint) else "light"


def _dynamo_graphs() -> int:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return -1


def _encoded_together(model, bins: list[list], budget: int) -> list[list]:
    """The sets of samples whose distinct images the tower encodes once: each micro-batch, or each
    segment of micro-batches where the trainer encodes images once per segment (image_features.py)."""
    if not image_features.applies(model) or not hasattr(model.config, "vision_config"):
        return bins
    merge = int(model.config.vision_config.spatial_merge_size)
    return [[s for b in bins[seg.start : seg.stop] for s in b] for seg in image_features.segments(bins, merge, budget)]


def _step_report(args, model, inp, out, trainer, phases: Phases, progress: StepProgress, wall: float, graphs: int):
    m = out.metrics
    samples = progress.samples
    bins = micro_batches(model, samples, args.micro_batch_tokens)
    flops = vlm_flops(model, samples, _encoded_together(model, bins, args.micro_batch_tokens))
    train_s = m["perf/train_seconds"]
    gpu = phases.durations()
    return {
        "step": inp.step,
        "wall_s": round(wall, 3),
        "train_s": round(train_s, 3),
        "load_s": round(progress.load_seconds, 3),
        "commit_s": round(wall - progress.commit_started, 3) if progress.commit_started else None,
        "samples": len(samples),
        "tokens": flops["tokens"],
        "response_tokens": flops["lm_rows"],
        "image_patches": flops["patches"],
        "micro_batches": len(bins),
        "largest_micro_batch_tokens": max(sum(s.n_tokens for s in b) for b in bins),
        "largest_micro_batch_patches": max(vlm_flops(model, [], [b])["patches"] for b in bins),
        "tokens_per_s": round(flops["tokens"] / train_s, 1),
        "tflops_per_s": round(flops["total"] / train_s / 1e12, 2),
        "mfu": round(flops["total"] / train_s / args.peak_flops, 4),
        "mfu_gpu_timeline": round(flops["total"] / max(sum(gpu.values()) / 1e3, 1e-9) / args.peak_flops, 4),
        "mfu_6n": round(6 * flops["params"] * flops["tokens"] / train_s / args.peak_flops, 4),
        "flops_share": {k: round(flops[k] / flops["total"], 3) for k in ("text", "attention", "lm_head", "vision")},
        "memory": {k.removeprefix("perf/"): round(v, 3) for k, v in m.items() if "gib" in k or "retries" in k},
        "checkpoint": {
            "kind": _checkpoint_kind(out.checkpoint, m),
            **{
                k.removeprefix("perf/checkpoint_"): round(v, 3)
                for k, v in m.items()
                if k.startswith("perf/checkpoint_")
            },
        },
        "phases_ms": {k: round(v, 1) for k, v in sorted(gpu.items(), key=lambda kv: -kv[1])},
        "dynamo_graphs_new": max(_dynamo_graphs() - graphs, 0) if graphs >= 0 else None,
        "loss": m.get("train/loss"),
        "grad_norm": m.get("train/grad_norm"),
    }


def _out_of_memory(step: int, samples: int, err: Exception, device: torch.device) -> dict:
    """What a step that ran out of GPU memory leaves to read: where, and the allocator's state."""
    stats = torch.cuda.memory_stats(device)
    return {
        "step": step,
        "samples": samples,
        "message": str(err)[:1500],
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / 2**30, 2),
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "inactive_split_gib": round(stats.get("inactive_split_bytes.all.current", 0) / 2**30, 2),
    }


def _summary(steps: list[dict]) -> dict:
    """Steady state: the steps after the first two (compilation, then AdamW's state created)."""
    steady = steps[2:] or steps[-1:]

    def mean(key):
        vals = [s[key] for s in steady if s.get(key) is not None]
        return round(sum(vals) / len(vals), 4) if vals else None

    peak = max((s["memory"].get("train_peak_allocated_gib", 0) for s in steps), default=None)
    return {
        "steady_steps": [s["step"] for s in steady],
        "tokens_per_s": mean("tokens_per_s"),
        "mfu": mean("mfu"),
        "mfu_6n": mean("mfu_6n"),
        "train_s": mean("train_s"),
        "peak_allocated_gib": peak,
        "peak_reserved_gib": max((s["memory"].get("train_peak_reserved_gib", 0) for s in steps), default=None),
        "alloc_retries": sum(s["memory"].get("train_alloc_retries", 0) for s in steps),
    }


def run_product(args) -> dict:
    device = torch.device(args.device)
    os.environ["TEMPO_RL_COMPILE"] = "1" if args.compile == "on" else "0"
    os.environ["TEMPO_RL_EXPANDABLE_SEGMENTS"] = "1" if args.expandable == "on" else "0"
    os.environ["TEMPO_RL_VISION_CHECKPOINT"] = "1" if args.vision_checkpoint == "on" else "0"
    os.environ["TEMPO_RL_VISION_ONCE"] = "auto" if args.vision_once == "on" else "0"
    os.environ["TEMPO_RL_VISION_VARLEN"] = "1" if args.vision_attention == "packed" else "0"
    os.environ["TEMPO_RL_PINNED_COPIES"] = "1" if args.pinned_copies == "on" else "0"
    if args.deterministic:  # as every trainer of a deterministic run starts (supervise/trainer-process.ts)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    work = Path(args.work or tempfile.mkdtemp(prefix="tempo-rl-bench-trainer-"))
    reserved = (
        torch.empty(int(args.reserve_gib * 2**30), dtype=torch.uint8, device=device)
        if args.reserve_gib and device.type == "cuda"
        else None
    )
    t0 = time.perf_counter()
    if args.model:
        base, model = Path(args.model), None
    else:
        model, base = build_shape(args.shape, args.layers, work / "base", device, args.seed)
    trainer = Trainer(device=device, background_checkpoints=args.checkpoint == "background")
    hyper = _hyper(args)
    if model is not None:
        trainer.state = TrainerState(
            "bench", -1, str(base), model, make_optimizer(model, hyper), trainer._vision(model, str(base))
        )
    else:
        trainer.ensure_state(_step_input(args, work, base, [], 0, hyper))
    model = trainer.state.model
    setup_s = time.perf_counter() - t0
    phases = Phases(model, optimizer=trainer.state.optimizer, cuda=device.type == "cuda")
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": args.model or args.shape,
        "layers": model.config.text_config.num_hidden_layers,
        "params": sum(p.numel() for p in model.parameters()),
        "settings": {k: v for k, v in vars(args).items() if k not in ("work",)},
        "setup_s": round(setup_s, 2),
        "steps": [],
    }
    started = time.perf_counter()
    counts = [int(n) for n in args.samples_per_step.split(",")] if args.samples_per_step else [args.samples]
    for step in range(args.steps):
        shape = argparse.Namespace(**{**vars(args), "samples": counts[min(step, len(counts) - 1)]})
        refs = write_samples(work / "blobs", trainer.state.vision, model.config, shape, seed=args.seed * 1000 + step)
        if step == args.steps - 1 and args.last_step_full and not args.keep_checkpoint_files:
            _drop_written_checkpoints(trainer, work / "run")
        inp = _step_input(args, work, base, refs, step, hyper)
        progress = StepProgress(phases, trainer)
        graphs = _dynamo_graphs()
        tracker = LiveTensorBytes() if args.trace_memory else None
        t = time.perf_counter()
        try:
            with progress, tracker or nullcontext():
                out = trainer.train_step(inp, progress)
        except torch.cuda.OutOfMemoryError as err:
            result["out_of_memory"] = _out_of_memory(step, len(refs), err, device)
            _write(args.out, result)
            break
        phases.sync()
        report = _step_report(args, model, inp, out, trainer, phases, progress, time.perf_counter() - t, graphs)
        if tracker is not None:  # tensors made in the step only (the weights were there before)
            report["live_tensors_mib"] = {"peak": round(tracker.peak / 2**20, 1), "end": round(tracker.now / 2**20, 1)}
        result["steps"].append(report)
        result["summary"] = _summary(result["steps"])
        _write(args.out, result)
        if args.time_budget and time.perf_counter() - started > args.time_budget:
            result["stopped"] = f"time budget of {args.time_budget} s spent after step {step}"
            break
    if trainer.background is not None:
        trainer.background.wait()
        result["background_written"] = trainer.background.metrics()
    phases.close()
    del reserved
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    _write(args.out, result)
    if "out_of_memory" in result:
        print(json.dumps(result))
        raise SystemExit(3)  # the script that ran it tries a smaller micro-batch
    return result


def _write(path: str | None, result: dict) -> None:
    """The result so far, replaced whole after every step: a bench cut short leaves the steps it made."""
    if not path:
        return
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(path)
