"""Seconds per GB of a weight sync into a live engine, end to end (pause → resume), and proof that the
weights arrived: the engine's logprobs of its own samples against the trainer's, before and after.

    $TEMPO_RL_PYTHON bench/weight-sync.py --engine URL --model DIR [--transport ipc|disk] [--rounds 3]
        [--bucket-mb 1024] [--dtype bfloat16] [--device cuda] [--sleep-level 1|2] [--load-mode auto|layerwise|direct] [--json]

The trainer's model (DIR, fp32 master weights on --device) is perturbed once, so that the engine serves
other weights until a sync lands. Each round syncs it (version 1, 2, …) the way the sync_weights
activity does: ipc — buckets through CUDA IPC (/dev/shm on CPU); disk — the model directory written
first (not timed in s/GB, reported apart), then reloaded by the engine. With --sleep-level the engine
(started with --enable-sleep-mode) is put to sleep before each round and woken inside the sync, as a
colocated engine is: sleep and wake seconds are reported too. Then one text prompt is sampled and its
tokens scored by the trainer (bf16 autocast when --dtype bfloat16, as a train step computes).

Each round's row holds where an ipc load went (the trainer's view: `begin_seconds`, `transfer_seconds`,
`finish_seconds`; the engine's: `engine_*_seconds`, docs/CONTRACTS.md; `direct_loads`: the workers
that copied each weight in place). --load-mode: the engine's update mode: auto (as the product syncs by
default, engines.ipc_load: direct where the weights' loaded form is their checkpoint form: a GPU,
unquantized, no fused experts; else layer-wise), layerwise (vLLM's layer-wise reload) or direct (each
weight copied into its parameter in place, nothing reprocessed); the logprob gap after the last round
says whether the weights arrived whole."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))

from trainer.checkpoint.atomic import write_model_dir  # noqa: E402
from trainer.contract import SyncWeightsInput  # noqa: E402
from trainer.step.gradients import compute_precision  # noqa: E402
from trainer.model.policy import TrainSample, forward_response, load_policy  # noqa: E402
from trainer.weights.ipc import IpcLoader, specs  # noqa: E402
from trainer.weights.sync import DirectoryLoader, sleep_engines, sync_weights_phased  # noqa: E402
from tempo_common.weight_buckets import UPDATE_MODES  # noqa: E402


def engine_sample(url: str, seed: int, max_tokens: int = 48) -> tuple[list[int], list[int], list[float]]:
    prompt = requests.post(
        f"{url}/tokenize",
        json={"messages": [{"role": "user", "content": "Describe a triangle."}], "add_generation_prompt": True},
        timeout=60,
    ).json()["tokens"]
    body = {
        "request_id": f"bench-sync-{seed}-{time.time_ns()}",
        "token_ids": prompt,
        "output_mode": "tokens",
        "sampling_params": {"max_tokens": max_tokens, "temperature": 1.0, "top_p": 1.0, "seed": seed, "logprobs": 0},
    }
    choice = requests.post(f"{url}/inference/v1/generate", json=body, timeout=300).json()["choices"][0]
    return prompt, choice["token_ids"], [e["logprob"] for e in choice["logprobs"]["content"]]


def logprob_gap(url: str, model: torch.nn.Module, dtype: str, seed: int) -> float:
    """Mean |engine − trainer| logprob over one sample's tokens."""
    prompt, tokens, engine_lp = engine_sample(url, seed)
    s = TrainSample(
        input_ids=prompt + tokens,
        prompt_len=len(prompt),
        loss_mask=torch.ones(len(tokens)),
        rollout_logprobs=torch.zeros(len(tokens)),
        advantage=0.0,
    )
    with torch.no_grad(), compute_precision(model, dtype):
        mine = forward_response(model, [s], 1.0, with_entropy=False).logprobs[0].float().cpu()
    return float((mine - torch.tensor(engine_lp)).abs().mean())


def one_round(args, model, version: int, scratch: Path) -> dict:
    row: dict = {"version": version}
    if args.sleep_level:
        row["sleep_seconds"], errors = sleep_engines([args.engine], args.sleep_level)
        if errors:
            raise SystemExit(f"sleep failed: {errors}")
    inp = SyncWeightsInput(
        run_id="bench-weight-sync",
        weight_version=version,
        checkpoint=str(scratch),
        engines=[args.engine],
        pause_mode="wait",
        transport=args.transport,
        engine_dtype=args.dtype,
        ipc_bucket_mb=args.bucket_mb,
        wake_engines=bool(args.sleep_level),
    )
    if args.transport == "ipc":
        loader = IpcLoader(model, getattr(torch, args.dtype), args.bucket_mb * 2**20, mode=args.load_mode)
    else:
        t0 = time.perf_counter()
        shutil.rmtree(scratch, ignore_errors=True)
        write_model_dir(scratch, model, args.model)
        row["write_seconds"] = time.perf_counter() - t0
        loader = DirectoryLoader(str(scratch))
    release = torch.cuda.empty_cache if torch.cuda.is_available() else (lambda: None)
    out = sync_weights_phased(inp, loader, before_kv_wake=release)
    if not all(e.ok for e in out.engines):
        raise SystemExit(f"sync failed: {[e.error for e in out.engines]}")
    row.update(out.timings)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--transport", choices=["ipc", "disk"], default="ipc")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bucket-mb", type=int, default=1024)
    p.add_argument("--load-mode", choices=UPDATE_MODES, default=UPDATE_MODES[0])
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sleep-level", type=int, choices=[1, 2], default=None)
    p.add_argument("--noise", type=float, default=0.02, help="the perturbation of the trainer's weights (× their std)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the perturbation's seed (default: a new one each run, so that an engine a run before left with the "
        "same weights cannot pass for a load that arrived whole)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    url = args.engine.rstrip("/")
    args.engine = url
    model = load_policy(args.model, args.device).eval()
    weights = sum(t.numel() for t in model.parameters())
    args.seed = args.seed if args.seed is not None else time.time_ns() % 2**31
    torch.manual_seed(args.seed)
    with torch.no_grad():
        for t in model.parameters():
            t.add_(torch.randn_like(t) * args.noise * (t.float().std() if t.numel() > 1 else 1.0))
    before = logprob_gap(url, model, args.dtype, seed=7)
    scratch = Path(tempfile.mkdtemp(prefix="tempo-rl-bench-sync-"))
    try:
        rows = [one_round(args, model, v, scratch / "weights") for v in range(1, args.rounds + 1)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    after = logprob_gap(url, model, args.dtype, seed=7)
    gb = specs_bytes(model, args.dtype) / 1e9
    result = {
        "engine": url,
        "model": args.model,
        "transport": args.transport,
        "dtype": args.dtype,
        "bucket_mb": args.bucket_mb,
        "load_mode": args.load_mode,
        "seed": args.seed,
        "parameters": weights,
        "gb": gb,
        "rounds": rows,
        "seconds_per_gb": [r["seconds"] / gb for r in rows],
        "logprob_gap_before": before,
        "logprob_gap_after": after,
    }
    if args.json:
        print(json.dumps(result))
        return
    for r in rows:
        parts = (
            "sleep_seconds",
            "wake_seconds",
            "write_seconds",
            "begin_seconds",
            "transfer_seconds",
            "finish_seconds",
        )
        parts += tuple(sorted(k for k in r if k.startswith("engine_")))
        extra = "".join(f", {k} {r[k]:.3f} s" for k in parts if k in r)
        print(
            f"v{r['version']}: {r['seconds']:.3f} s pause→resume ({r['seconds'] / gb:.3f} s/GB), load {r['load_seconds']:.3f} s{extra}"
        )
    print(
        f"{gb:.2f} GB ({weights / 1e9:.2f} B parameters, {args.dtype}); mean |Δ logprob| engine vs trainer: "
        f"{before:.4f} before the first sync, {after:.5f} after the last"
    )


def specs_bytes(model: torch.nn.Module, dtype: str) -> int:
    size = getattr(torch, dtype).itemsize
    return sum(size * int(torch.tensor(shape).prod()) for _, _, shape in specs(model, getattr(torch, dtype)))


if __name__ == "__main__":
    main()
