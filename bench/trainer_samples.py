"""Synthetic Geo3K-like GRPO samples for bench/trainer.py, written to a blob store as a rollout writes
them: groups of `--group-size` samples sharing one prompt and its diagram.

- Diagrams: line drawings on white, whose pixel counts follow the 954 Geo3K diagrams of the offline
  sample (median 99,416 pixels, 90th percentile 271,392, largest 562,830): log-normal around the
  median with σ 0.78, capped at the largest; aspect ratio between 1:2 and 2:1. Through the model's own
  processor, as the trainer reads them (the 2B shape: 64 to 16,384 merged tokens an image).
- Prompts: `--prompt-tokens MIN-MAX` tokens in all, uniform (the diagram's placeholders included).
- Responses: log-normal lengths as `--variable` draws them (e^6.4 ≈ 600 tokens typical, σ 0.9,
  within 50 and `--max-response`), half of them with a 30-token tool observation under loss mask 0
  (a multi-turn episode's), rollout logprobs in (−5, 0], rewards 0 or 1."""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
from pathlib import Path

GEO3K_MEDIAN_PIXELS = 99_416
GEO3K_SIGMA = 0.78
GEO3K_MAX_PIXELS = 562_830
OBSERVATION_TOKENS = 30
TEXT_IDS = (1000, 150_000)  # ordinary vocabulary, clear of Qwen's special and vision tokens


def diagram_png(rng: random.Random) -> bytes:
    from PIL import Image, ImageDraw

    pixels = min(GEO3K_MAX_PIXELS, math.exp(rng.gauss(math.log(GEO3K_MEDIAN_PIXELS), GEO3K_SIGMA)))
    aspect = math.exp(rng.uniform(math.log(0.5), math.log(2.0)))
    w, h = max(32, int(math.sqrt(pixels * aspect))), max(32, int(math.sqrt(pixels / aspect)))
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    points = [(rng.randrange(w), rng.randrange(h)) for _ in range(6)]
    for a, b in zip(points, points[1:] + points[:1], strict=False):
        draw.line([a, b], fill="black", width=2)
    for x, y in points:
        draw.text((x + 3, y + 3), chr(rng.randrange(65, 91)), fill=(220, 30, 30))
    cx, cy, r = w // 2, h // 2, min(w, h) // 4
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline="black", width=2)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _put(root: Path, ref: str, data: bytes) -> str:
    path = root / ref[len("blob:") :]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return ref


def _response(rng: random.Random, args) -> tuple[list[int], list[int], list[float]]:
    n = int(min(args.max_response, max(50, rng.lognormvariate(args.response_mu, args.response_sigma))))
    ids = [rng.randrange(*TEXT_IDS) for _ in range(n)]
    mask = [1] * n
    if n > 2 * OBSERVATION_TOKENS and rng.random() < 0.5:  # a tool's feedback inside the response
        at = rng.randrange(OBSERVATION_TOKENS, n - OBSERVATION_TOKENS)
        mask[at : at + OBSERVATION_TOKENS] = [0] * OBSERVATION_TOKENS
    logprobs = [-rng.random() * 5 if m else 0.0 for m in mask]
    return ids, mask, logprobs


def write_samples(root: Path, vision, config, args, seed: int) -> list[dict]:
    """`args.samples` samples in groups of `args.group_size` into the blob store at `root`; their refs
    (with reward and group id) as a step's input lists them."""
    rng = random.Random(seed)
    lo, hi = (int(x) for x in args.prompt_tokens.split("-"))
    refs = []
    for g in range(-(-args.samples // args.group_size)):
        image_refs, placeholders = [], 0
        if vision is not None and args.images:
            png = diagram_png(rng)
            digest = hashlib.sha256(png).hexdigest()
            image_refs = [_put(root, f"blob:cas/{digest[:2]}/{digest}.png", png)]
            from PIL import Image

            grid = vision.process([Image.open(io.BytesIO(png)).convert("RGB")]).image_grid_thw
            placeholders = vision.placeholders_needed(grid)
        text = max(8, rng.randint(lo, hi) - placeholders - 2)
        prompt = [rng.randrange(*TEXT_IDS) for _ in range(text)]
        if placeholders:
            image = (
                [config.vision_start_token_id] + [config.image_token_id] * placeholders + [config.vision_end_token_id]
            )
            prompt = prompt[:4] + image + prompt[4:]
        for k in range(min(args.group_size, args.samples - g * args.group_size)):
            ids, mask, logprobs = _response(rng, args)
            key = f"bench/{seed}/{g}/{k}"
            reward = float(rng.random() < 0.5)
            doc = {
                "schema_version": 1,
                "episode_id": key,
                "run_id": "bench",
                "step": 0,
                "prompt_index": g,
                "sample_index": k,
                "group_id": f"{seed}/{g}",
                "prompt_ids": prompt,
                "response_ids": ids,
                "loss_mask": mask,
                "rollout_logprobs": logprobs,
                "images": image_refs,
                "reward": reward,
                "status": "COMPLETED",
                "truncated_reason": None,
                "temperature": 1.0,
                "label": "1",
                "turns": [],
                "routed_experts": None,
            }
            ref = _put(root, f"blob:named/samples/{key}.json", json.dumps(doc).encode())
            refs.append({"ref": ref, "reward": reward, "group_id": f"{seed}/{g}"})
    return refs
