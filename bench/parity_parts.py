"""bench/logprob-parity.py's prompts and statistics. Prompts: Geo3K problems as the Geo3K environment asks
them (system prompt, the diagram, the question and the calc_score instruction, the tool offered), or
text-only chat prompts; images normalised as the rollout side normalises them. Statistics: |trainer −
engine| per token, the first tokens of each response apart."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import torch

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
