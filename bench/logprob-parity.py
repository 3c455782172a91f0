"""The train/rollout logprob gap on a live engine: the engine's sampled-token logprobs against the
trainer's logprobs of the same tokens, computed as a train step computes them.

    $TEMPO_RL_PYTHON bench/logprob-parity.py --engine URL --model DIR [--data [DIR]] [--prompts N]
        [--samples K] [--max-tokens T] [--temperature 1.0] [--compute-dtype bfloat16|float32]
        [--lm-head-fp32] [--device cuda|cpu] [--seed S] [--concurrency C] [--micro-batch-tokens N]
        [--no-grad] [--json]
    $TEMPO_RL_PYTHON bench/logprob-parity.py --synthetic (--model DIR | --shape qwen3-vl-2b) [...]

1. Prompts: with --data, the first N Geo3K problems of DIR (a geo3k folder: test.jsonl and images/,
   or one .jsonl file) as the Geo3K environment asks them — system prompt, the diagram as a data: URL,
   the question and the calc_score instruction, the tool offered — rendered by the engine
   (/v1/chat/completions/render: token ids with the image placeholders expanded, and the image
   features). `--data` without DIR: TEMPO_RL_GEO3K_DIR, else ../shared/data/geo3k beside the repo.
   Without --data: N text-only chat prompts through /tokenize.
2. Rollout: K completions per prompt through /inference/v1/generate (seeded, logprobs 0, top_p 1), at
   --temperature: the engine's logprob of each sampled token (--logprobs-mode processed_logprobs: after
   the temperature, what the trainer compares against).
3. Scoring: each completion becomes the sample a train step would get (model.prepare_sample: the image
   through the trainer's own VisionProcessor from the same PNG bytes the engine was sent), and the
   samples run through forward_response in the trainer's micro-batches (--micro-batch-tokens, the
   trainer's default), under gradients.compute_precision(--compute-dtype), gradients on, entropy asked
   for — the forward whose logprobs train/train_rollout_logprob_abs_diff compares with the rollout's in
   a one-update step. Its GPU memory is the model's and one micro-batch's forward, however many samples:
   each micro-batch's graph is dropped before the next runs, only its logprobs kept on the host
   (`trainer_peak_allocated_gib` in the result); --no-grad scores without the graph at all.

--synthetic: no engine, the trainer side alone — Geo3K-like samples (bench/trainer_samples.py) with
made-up engine logprobs, to measure the scoring's time and memory (the |diff| is no parity figure).

Prints |trainer − engine| per sampled token: mean (= train/train_rollout_logprob_abs_diff), median,
p99, max, the token count, and the mean over the first 8 tokens of each response against the later
ones. --json: one object with these and the settings. Numbers are reported, never asserted.

--lm-head-fp32: the LM head's matmul in fp32 while the rest of the forward stays in --compute-dtype.
Done without touching the trainer: forward_response's call of lm_head.linear_logprobs (whose matmul
runs in autocast's dtype when autocast is on) goes, for the duration, to a wrapper that leaves
autocast and hands it fp32 hidden states, so it multiplies them by the fp32 master weight. The vision
tower and the decoder layers run under the compute precision as in a train step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workers"))
sys.path.append(
    str(REPO / "bench")
)  # parity_parts, trainer_samples, trainer_vlm (after workers: `trainer` is the package)

import trainer.model.policy as trainer_model  # noqa: E402
from trainer.contract import Hyper, Sample  # noqa: E402
from trainer.step.gradients import compute_precision  # noqa: E402
from trainer.model.policy import (  # noqa: E402
    TrainSample,
    VisionProcessor,
    forward_response,
    load_policy,
    micro_batches,
    prepare_sample,
)
from parity_parts import (  # noqa: E402, F401 (the tests reach them here)
    CALC_SCORE_TOOL,
    EARLY_TOKENS,
    data_url,
    geo3k_messages,
    geo3k_rows,
    normalized_png,
    report_lines,
    summarize,
    text_messages,
)

# The same place the repo's tests look for the Geo3K folder.
DEFAULT_GEO3K = Path(os.environ.get("TEMPO_RL_GEO3K_DIR") or REPO.parent / "shared" / "data" / "geo3k")


@dataclass
class Prompt:
    ids: list[int]
    features: dict | None = None  # the render's image features, passed to generate unchanged
    image_png: bytes | None = None  # the bytes the engine saw, for the trainer's own processor


@dataclass
class Completion:
    prompt: Prompt
    ids: list[int]
    logprobs: list[float]


# --- engine --------------------------------------------------------------------------------------


def post(url: str, path: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")[:2000]
        hint = " (vLLM 0.32 serves render and generate only with --enable-scale-out)" if err.code in (403, 404) else ""
        raise SystemExit(f"{url}{path} answered {err.code}{hint}: {detail}") from err


def completion_from_choice(prompt: Prompt, choice: dict) -> Completion:
    """The sampled ids and their logprobs from a generate choice, checked as the rollout client checks
    them: one logprob per token, each the generated token's."""
    ids = [int(t) for t in choice["token_ids"]]
    content = choice["logprobs"]["content"]
    if len(content) != len(ids):
        raise ValueError(f"{len(ids)} tokens but {len(content)} logprobs")
    for i, (tok, entry) in enumerate(zip(ids, content, strict=False)):
        if "token_id" in entry and int(entry["token_id"]) != tok:
            raise ValueError(f"logprob {i} is token {entry['token_id']}'s, the sampled token is {tok}")
    return Completion(prompt, ids, [float(e["logprob"]) for e in content])


def generate(url: str, prompt: Prompt, seed: int, max_tokens: int, temperature: float) -> Completion:
    body = {
        "request_id": f"logprob-parity-{seed}-{time.time_ns()}",
        "token_ids": prompt.ids,
        "output_mode": "tokens",
        "sampling_params": {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": 1.0,
            "seed": seed,
            "logprobs": 0,
        },
    }
    if prompt.features is not None:
        body["features"] = prompt.features
    return completion_from_choice(prompt, post(url, "/inference/v1/generate", body)["choices"][0])


def rollout(
    url: str, prompts: list[Prompt], samples: int, max_tokens: int, temperature: float, seed: int, concurrency: int
) -> list[Completion]:
    """K seeded completions per prompt, sent together so that the engine batches them as in a rollout."""
    jobs = [(p, seed + i * samples + k) for i, p in enumerate(prompts) for k in range(samples)]
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(lambda job: generate(url, job[0], job[1], max_tokens, temperature), jobs))


# --- prompts (parity_parts.py) ----------------------------------------------------------------


def build_prompts(url: str, n: int, data: Path | None) -> list[Prompt]:
    if data is None:
        return [
            Prompt(post(url, "/tokenize", {"messages": text_messages(i), "add_generation_prompt": True})["tokens"])
            for i in range(n)
        ]
    prompts = []
    for problem, png in geo3k_rows(data, n):
        body = {
            "messages": geo3k_messages(problem, png),
            "tools": [CALC_SCORE_TOOL],
            "tool_choice": "none",
            "add_generation_prompt": True,
            "mm_payload": "tensors",
        }
        rendered = post(url, "/v1/chat/completions/render", body)
        prompts.append(Prompt(rendered["token_ids"], rendered.get("features"), png))
    return prompts


# --- trainer side --------------------------------------------------------------------------------


class MemoryBlobs:
    """The blob store prepare_sample reads images from, holding the PNGs the engine was sent."""

    def __init__(self):
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        ref = f"blob:cas/{digest[:2]}/{digest}.png"
        self.blobs[ref] = data
        return ref

    def get_bytes(self, ref: str) -> bytes:
        return self.blobs[ref]


def train_sample(
    c: Completion, index: int, blobs: MemoryBlobs, vision: VisionProcessor | None, temperature: float
) -> TrainSample:
    """The sample a train step gets for this completion (one turn, every token trained)."""
    n = len(c.ids)
    doc = Sample(
        episode_id=f"parity/{index}",
        run_id="parity",
        step=0,
        prompt_index=index,
        sample_index=0,
        group_id=f"parity/{index}",
        prompt_ids=c.prompt.ids,
        response_ids=c.ids,
        loss_mask=[1] * n,
        rollout_logprobs=c.logprobs,
        images=[blobs.put(c.prompt.image_png)] if c.prompt.image_png else [],
        reward=0.0,
        status="COMPLETED",
        temperature=temperature,
    )
    return prepare_sample(doc, 0.0, blobs, vision)


@contextmanager
def lm_head_in_fp32():
    """forward_response's LM head (model.linear_logprobs, its path without an LM-head bias or an
    entropy gradient) outside autocast, on fp32 hidden states: its matmul then runs in fp32 against
    the fp32 master weight while the rest of the forward — the vision tower and every decoder layer —
    stays under the compute precision. Swaps the name forward_response calls, for the duration."""
    plain = trainer_model.linear_logprobs

    def fp32(hidden, weight, *args, **kwargs):
        with torch.autocast(hidden.device.type, enabled=False):
            return plain(hidden.float(), weight.float(), *args, **kwargs)

    trainer_model.linear_logprobs = fp32
    try:
        yield
    finally:
        trainer_model.linear_logprobs = plain


def trainer_logprobs(
    model,
    samples: list[TrainSample],
    temperature: float,
    compute_dtype: str,
    lm_head_fp32: bool,
    micro_batch_tokens: int | None = None,
    grad: bool = True,
) -> list[torch.Tensor]:
    """forward_response over the trainer's micro-batches (packed on a GPU, padded on a CPU; of
    `micro_batch_tokens`, by default the trainer's default), as gradients.accumulate_gradients runs it:
    gradients on (unless `grad` is False), the entropy asked for without its gradient.

    Memory is one micro-batch's, whatever the number of samples: only each one's logprobs are kept, on
    the host, and its graph — the activations a forward under gradients keeps for a backward that never
    comes here — is gone before the next one runs."""
    budget = micro_batch_tokens or Hyper().micro_batch_tokens
    out: dict[int, torch.Tensor] = {}
    for batch in micro_batches(model, samples, budget):
        out.update(_micro_batch_logprobs(model, batch, temperature, compute_dtype, lm_head_fp32, grad))
    return [out[id(s)] for s in samples]  # packing reorders samples


def _micro_batch_logprobs(model, batch, temperature, compute_dtype, lm_head_fp32, grad) -> dict[int, torch.Tensor]:
    """One micro-batch's logprobs on the host; nothing of its forward outlives the call."""
    with (
        torch.set_grad_enabled(grad),
        compute_precision(model, compute_dtype),
        lm_head_in_fp32() if lm_head_fp32 else nullcontext(),
    ):
        fwd = forward_response(model, batch, temperature, with_entropy=True, entropy_grad=False)
    return {id(s): lp.detach().float().cpu() for s, lp in zip(batch, fwd.logprobs, strict=False)}


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--engine", help="URL of a vLLM engine serving --model")
    p.add_argument("--model", type=Path, help="the model directory the engine serves")
    p.add_argument(
        "--data",
        type=Path,
        nargs="?",
        const=DEFAULT_GEO3K,
        default=None,
        help=f"a Geo3K folder or .jsonl file (no value: {DEFAULT_GEO3K}); absent: text-only prompts",
    )
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=4, help="completions per prompt")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--compute-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument(
        "--lm-head-fp32", action="store_true", help="the LM head's matmul in fp32, the rest in --compute-dtype"
    )
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0, help="the first sampling seed (then one per completion)")
    p.add_argument("--concurrency", type=int, default=16, help="generate requests in flight")
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=Hyper().micro_batch_tokens,
        help="the trainer's micro-batches (grpo.micro_batch_tokens): the scoring's memory is one micro-batch's",
    )
    p.add_argument("--no-grad", dest="grad", action="store_false", help="score without gradients (less memory)")
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="no engine: Geo3K-like samples (bench/trainer_samples.py) and made-up engine logprobs — the"
        " trainer side's time and memory only; its |diff| is no parity figure",
    )
    p.add_argument("--shape", choices=["qwen3-vl-2b"], default=None, help="--synthetic: this shape, built in memory")
    p.add_argument("--layers", type=int, default=None, help="--shape with this many layers")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not args.synthetic and (args.engine is None or args.model is None):
        p.error("--engine and --model are required (or --synthetic)")
    if args.synthetic and (args.model is None) == (args.shape is None):
        p.error("--synthetic takes --model DIR or --shape (one of them)")
    return args


def synthetic_samples(args, model, vision, base: Path) -> list[TrainSample]:
    """--prompts Geo3K-like prompts × --samples responses of --max-tokens tokens, through the trainer's
    own sample loading (the images through the model's processor)."""
    from tempo_common.blobs import BlobStore
    from trainer_samples import write_samples

    shape = argparse.Namespace(
        samples=args.prompts * args.samples,
        group_size=args.samples,
        prompt_tokens="300-1500",
        response_mu=math.log(args.max_tokens),
        response_sigma=0.0,
        max_response=args.max_tokens,
        images=True,
    )
    refs = write_samples(base, vision, model.config, shape, seed=args.seed)
    blobs = BlobStore(base)
    processed: dict = {}
    return [
        prepare_sample(Sample.model_validate(blobs.get_json(r["ref"])), 0.0, blobs, vision, processed=processed)
        for r in refs
    ]


def score(model, samples: list[TrainSample], args) -> tuple[list[torch.Tensor], dict]:
    """The trainer's logprobs of the samples, and what scoring them took (time; GPU memory)."""
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    held = torch.cuda.memory_allocated() if cuda else 0
    t0 = time.time()
    logprobs = trainer_logprobs(
        model, samples, args.temperature, args.compute_dtype, args.lm_head_fp32, args.micro_batch_tokens, args.grad
    )
    stats = {
        "score_s": round(time.time() - t0, 2),
        "micro_batches": len(micro_batches(model, samples, args.micro_batch_tokens)),
        "sample_tokens": sum(s.n_tokens for s in samples),
    }
    if cuda:
        stats.update(
            model_gib=round(held / 2**30, 2),
            trainer_peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
            trainer_peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2),
        )
    return logprobs, stats


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    rollout_s, url, version = 0.0, None, None
    if args.synthetic:
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="tempo-rl-parity-"))
        if args.shape:
            from trainer_vlm import build_shape

            model, base = build_shape(args.shape, args.layers, work / "base", torch.device(args.device), args.seed)
        else:
            model, base = load_policy(args.model, args.device, torch.float32), args.model
        vision = VisionProcessor(base, model.config) if hasattr(model.config, "vision_config") else None
        samples = synthetic_samples(args, model, vision, work / "blobs")
        prompts = sorted({tuple(s.input_ids[: s.prompt_len]) for s in samples})
    else:
        url = args.engine.rstrip("/")
        prompts = build_prompts(url, args.prompts, args.data)
        t0 = time.time()
        completions = rollout(
            url, prompts, args.samples, args.max_tokens, args.temperature, args.seed, args.concurrency
        )
        rollout_s = time.time() - t0
        model = load_policy(args.model, args.device, torch.float32)  # fp32 master weights, as the trainer holds them
        vision = VisionProcessor(args.model, model.config) if hasattr(model.config, "vision_config") else None
        blobs = MemoryBlobs()
        samples = [train_sample(c, i, blobs, vision, args.temperature) for i, c in enumerate(completions)]
        try:
            version = json.loads(urllib.request.urlopen(url + "/version", timeout=30).read()).get("version")
        except (OSError, ValueError):
            version = None
    trainer, stats = score(model, samples, args)
    settings = {
        "engine": url,
        "engine_version": version,
        "model": str(args.model or args.shape),
        "data": str(args.data) if args.data else None,
        "synthetic": args.synthetic,
        "prompts": len(prompts),
        "samples": args.samples,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "compute_dtype": args.compute_dtype,
        "lm_head_fp32": args.lm_head_fp32,
        "device": args.device,
        "seed": args.seed,
        "micro_batch_tokens": args.micro_batch_tokens,
        "grad": args.grad,
        "prompt_tokens_mean": sum(s.prompt_len for s in samples) / max(len(samples), 1),
    }
    result = {
        **summarize(trainer, [s.rollout_logprobs for s in samples]),
        "settings": settings,
        "rollout_s": round(rollout_s, 2),
        **stats,
    }
    if args.synthetic:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result) if args.json else "\n".join(report_lines(result)))
    return result


if __name__ == "__main__":
    main()
