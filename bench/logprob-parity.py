"""The train/rollout logprob gap on a live engine: the engine's sampled-token logprobs against the
trainer's logprobs of the same tokens, computed as a train step computes them.

    $TEMPO_RL_PYTHON bench/logprob-parity.py --engine URL --model DIR [--data [DIR]] [--prompts N]
        [--samples K] [--max-tokens T] [--temperature 1.0] [--compute-dtype bfloat16|float32]
        [--lm-head-fp32] [--device cuda|cpu] [--seed S] [--concurrency C] [--json]

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
   samples run through forward_response in the trainer's micro-batches, under
   gradients.compute_precision(--compute-dtype), gradients on, entropy asked for — the forward whose
   logprobs train/train_rollout_logprob_abs_diff compares with the rollout's in a one-update step.

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
import base64
import hashlib
import io
import json
import os
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

import trainer.model.policy as trainer_model  # noqa: E402
from trainer.contract import Hyper, Sample  # noqa: E402
from trainer.step.gradients import compute_precision  # noqa: E402
from trainer.model.policy import (
    TrainSample,
    VisionProcessor,
    forward_response,
    load_policy,
    micro_batches,
    prepare_sample,
)  # noqa: E402

# The same place the repo's tests look for the Geo3K folder.
DEFAULT_GEO3K = Path(os.environ.get("TEMPO_RL_GEO3K_DIR") or REPO.parent / "shared" / "data" / "geo3k")
EARLY_TOKENS = 8

# The Geo3K environment's prompt (lib/data/prompt.ts: buildMessages with the calc_score tool).
SYSTEM_PROMPT = "You are a helpful assistant that solves geometry problems step by step."
TOOL_INSTRUCTION = (
    "Reason step by step. You may check an answer with the calc_score tool, called as "
    '<tool_call>{"name": "calc_score", "arguments": {"answer": "..."}}</tool_call>. '
    "Put your final answer in \\boxed{}."
)
PLAIN_INSTRUCTION = "Reason step by step and put your final answer in \\boxed{}."
CALC_SCORE_TOOL = {
    "type": "function",
    "function": {
        "name": "calc_score",
        "description": "Check a candidate final answer to the problem. Returns whether it is correct.",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {"type": "string", "description": 'The final answer only, e.g. "5\\sqrt{3}" or "13\\pi/9".'}
            },
            "required": ["answer"],
        },
    },
}
TEXT_QUESTIONS = [
    "What is 7 times 8?",
    "Name three prime numbers and say why each is prime.",
    "How many sides has a hexagon, and what is the sum of its interior angles?",
    "A rectangle is 6 by 9. What is its area and its perimeter?",
    "What is the square root of 81?",
    "Which is larger, 3/4 or 2/3? Explain.",
    "Add 13, 29 and 58.",
    "A triangle has angles 35 and 65 degrees. What is the third?",
    "Is 91 prime?",
    "What is the circumference of a circle of radius 5?",
    "Solve 3x + 7 = 22.",
    "How many degrees are in a right angle, and in a straight angle?",
]


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


# --- prompts -------------------------------------------------------------------------------------


def normalized_png(raw: bytes) -> bytes:
    """An RGB PNG, transparency flattened onto white (lib/images.ts normalizeToPng): the trainer's
    processor (PIL convert("RGB")) and the engine's image loader then read the same pixels."""
    from PIL import Image

    img = Image.open(io.BytesIO(raw))
    if img.mode in ("RGBA", "LA", "P") and (img.mode != "P" or "transparency" in img.info):
        rgba = img.convert("RGBA")
        img = Image.new("RGB", rgba.size, (255, 255, 255))
        img.paste(rgba, mask=rgba.getchannel("A"))
    out = io.BytesIO()
    img.convert("RGB").save(out, format="PNG")
    return out.getvalue()


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def geo3k_file(data: Path) -> Path:
    if data.is_file():
        return data
    for name in ("test.jsonl", "train.jsonl", "train_sample.jsonl"):
        if (data / name).is_file():
            return data / name
    raise SystemExit(f"no test.jsonl / train.jsonl in {data}")


def image_bytes(entry, base: Path) -> bytes:
    """One image entry of a row: a path (relative to the dataset's folder) or a data: URL."""
    if isinstance(entry, dict):
        entry = entry.get("path") or entry.get("url")
    if isinstance(entry, str) and entry.startswith("data:"):
        return base64.b64decode(entry.split(",", 1)[1])
    return (base / str(entry)).read_bytes()


def geo3k_rows(data: Path, n: int) -> list[tuple[str, bytes]]:
    """(problem, normalised PNG of its first image) of the first n rows that have an image."""
    path = geo3k_file(data)
    rows = []
    with path.open(encoding="utf-8-sig") as f:
        for line in f:
            if len(rows) == n:
                break
            if not line.strip():
                continue
            row = json.loads(line)
            images = list(row.get("images") or []) + ([row["image"]] if row.get("image") else [])
            if images:
                rows.append((row["problem"], normalized_png(image_bytes(images[0], path.parent))))
    return rows


def geo3k_messages(problem: str, png: bytes) -> list[dict]:
    question = problem.replace("<image>", "").strip()
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": data_url(png)}},
                {"type": "text", "text": f"{question}\n\n{TOOL_INSTRUCTION}"},
            ],
        },
    ]


def text_messages(i: int) -> list[dict]:
    question = TEXT_QUESTIONS[i % len(TEXT_QUESTIONS)]
    if i >= len(TEXT_QUESTIONS):
        question += f" (Question {i + 1}.)"  # distinct prompts, not prefix-cache hits of earlier ones
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{question}\n\n{PLAIN_INSTRUCTION}"},
    ]


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
    model, samples: list[TrainSample], temperature: float, compute_dtype: str, lm_head_fp32: bool
) -> list[torch.Tensor]:
    """forward_response over the trainer's micro-batches (packed on a GPU, padded on a CPU), as
    gradients.accumulate_gradients runs it: gradients on, the entropy asked for without its gradient."""
    out: dict[int, torch.Tensor] = {}
    for batch in micro_batches(model, samples, Hyper().micro_batch_tokens):
        with compute_precision(model, compute_dtype), lm_head_in_fp32() if lm_head_fp32 else nullcontext():
            fwd = forward_response(model, batch, temperature, with_entropy=True, entropy_grad=False)
        for s, lp in zip(batch, fwd.logprobs, strict=False):
            out[id(s)] = lp.detach().float().cpu()
    return [out[id(s)] for s in samples]  # packing reorders samples


# --- statistics ----------------------------------------------------------------------------------


def summarize(trainer: list[torch.Tensor], engine: list[torch.Tensor], early: int = EARLY_TOKENS) -> dict:
    """|trainer − engine| per token over all responses; the first `early` tokens of each response
    apart from the later ones (a response's opening tokens have the shortest context)."""
    diffs = [(t.double() - e.double()).abs() for t, e in zip(trainer, engine, strict=False)]
    every = torch.cat(diffs) if diffs else torch.zeros(0, dtype=torch.float64)
    first = torch.cat([d[:early] for d in diffs]) if diffs else every
    later = torch.cat([d[early:] for d in diffs]) if diffs else every

    def mean(t: torch.Tensor) -> float | None:
        return float(t.mean()) if t.numel() else None

    stat = (lambda q: float(torch.quantile(every, q))) if every.numel() else (lambda q: None)
    return {
        "tokens": every.numel(),
        "mean_abs_diff": mean(every),
        "median_abs_diff": stat(0.5),
        "p99_abs_diff": stat(0.99),
        "max_abs_diff": float(every.max()) if every.numel() else None,
        f"mean_abs_diff_first_{early}": mean(first),
        f"tokens_first_{early}": first.numel(),
        f"mean_abs_diff_after_{early}": mean(later),
        f"tokens_after_{early}": later.numel(),
    }


def report_lines(result: dict) -> list[str]:
    s, early = result["settings"], EARLY_TOKENS

    def f(v) -> str:
        return "n/a" if v is None else f"{v:.3g}"

    return [
        f"engine {s['engine']} ({s['engine_version']}), model {s['model']}",
        f"{s['prompts']} {'Geo3K (image)' if s['data'] else 'text'} prompts x {s['samples']} samples, "
        f"<= {s['max_tokens']} tokens, temperature {s['temperature']}; trainer on {s['device']}, "
        f"{s['compute_dtype']}{', LM head fp32' if s['lm_head_fp32'] else ''}",
        f"|trainer - engine| over {result['tokens']} tokens: mean {f(result['mean_abs_diff'])}, "
        f"median {f(result['median_abs_diff'])}, p99 {f(result['p99_abs_diff'])}, max {f(result['max_abs_diff'])}",
        f"mean, first {early} tokens of a response: {f(result[f'mean_abs_diff_first_{early}'])} "
        f"({result[f'tokens_first_{early}']} tokens); after: {f(result[f'mean_abs_diff_after_{early}'])} "
        f"({result[f'tokens_after_{early}']} tokens)",
    ]


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--engine", required=True, help="URL of a vLLM engine serving --model")
    p.add_argument("--model", required=True, type=Path, help="the model directory the engine serves")
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
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    url = args.engine.rstrip("/")
    prompts = build_prompts(url, args.prompts, args.data)
    t0 = time.time()
    completions = rollout(url, prompts, args.samples, args.max_tokens, args.temperature, args.seed, args.concurrency)
    rollout_s = time.time() - t0

    model = load_policy(args.model, args.device, torch.float32)  # fp32 master weights, as the trainer holds them
    vision = VisionProcessor(args.model, model.config) if hasattr(model.config, "vision_config") else None
    blobs = MemoryBlobs()
    samples = [train_sample(c, i, blobs, vision, args.temperature) for i, c in enumerate(completions)]
    t0 = time.time()
    trainer = trainer_logprobs(model, samples, args.temperature, args.compute_dtype, args.lm_head_fp32)
    score_s = time.time() - t0

    try:
        version = json.loads(urllib.request.urlopen(url + "/version", timeout=30).read()).get("version")
    except (OSError, ValueError):
        version = None
    settings = {
        "engine": url,
        "engine_version": version,
        "model": str(args.model),
        "data": str(args.data) if args.data else None,
        "prompts": len(prompts),
        "samples": args.samples,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "compute_dtype": args.compute_dtype,
        "lm_head_fp32": args.lm_head_fp32,
        "device": args.device,
        "seed": args.seed,
        "prompt_tokens_mean": sum(len(p.ids) for p in prompts) / max(len(prompts), 1),
    }
    result = {
        **summarize(trainer, [s.rollout_logprobs for s in samples]),
        "settings": settings,
        "rollout_s": round(rollout_s, 2),
        "score_s": round(score_s, 2),
    }
    print(json.dumps(result) if args.json else "\n".join(report_lines(result)))
    return result


if __name__ == "__main__":
    main()
