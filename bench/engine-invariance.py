"""Does an engine give a request the same tokens and logprobs whatever else it is batching?

    $TEMPO_RL_PYTHON bench/engine-invariance.py --engine URL [--prompts 24] [--max-tokens 48] [--json]

run.deterministic's engines must (docs/certification.md): a retried turn is generated again beside other
requests than the first time. Each of N seeded chat prompts is sent twice one at a time and twice 16 at
once (started 30 ms apart, so that prompts are computed beside others' decoding), text-only and with a
generated diagram (the image goes through the engine's vision tower, which batches the images of the
requests it schedules together), and the four answers of each are compared:
the same tokens, and the largest |Δ logprob| where the tokens are the same. Prints one line per kind and
pair, and with --json the figures as JSON."""

from __future__ import annotations

import argparse
import base64
import concurrent.futures as cf
import io
import json
import sys
import time

import requests
from PIL import Image, ImageDraw


def diagram(i: int) -> str:
    """A small line drawing, different for each prompt, as a data: URL."""
    img = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(img)
    d.polygon([(20, 200), (200, 200), (20 + 7 * (i % 25), 30)], outline="black", width=3)
    d.text((30, 150), f"{30 + i}", fill="black")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def ask(url: str, i: int, image: bool, max_tokens: int) -> tuple[str, list[float]]:
    text = {"type": "text", "text": f"Problem {i}: find the angle marked in the figure."}
    content = [{"type": "image_url", "image_url": {"url": diagram(i)}}, text] if image else [text]
    body = {
        "model": "tempo-rl",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": 1000 + i,
        "logprobs": True,
    }
    r = requests.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    return choice["message"]["content"] or "", [t["logprob"] for t in choice["logprobs"]["content"]]


def answers(url: str, n: int, image: bool, max_tokens: int, at_once: int) -> list[tuple[str, list[float]]]:
    def staggered(i: int) -> tuple[str, list[float]]:
        # started 30 ms apart, so that prompts are computed beside other requests' decoding, as in a run
        time.sleep(0.03 * (i % at_once) if at_once > 1 else 0)
        return ask(url, i, image, max_tokens)

    with cf.ThreadPoolExecutor(at_once) as ex:
        return list(ex.map(staggered, range(n)))


def compare(a, b) -> dict:
    same = [(x, y) for x, y in zip(a, b, strict=True) if x[0] == y[0]]
    worst = max((abs(u - v) for x, y in same for u, v in zip(x[1], y[1], strict=False)), default=0.0)
    return {"same_text": len(same), "of": len(a), "max_abs_logprob_diff": worst}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True)
    p.add_argument("--prompts", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    url = args.engine.rstrip("/")
    out: dict[str, dict] = {}
    for kind, image in (("text", False), ("image", True)):
        one = [answers(url, args.prompts, image, args.max_tokens, 1) for _ in range(2)]
        many = [answers(url, args.prompts, image, args.max_tokens, 16) for _ in range(2)]
        for pair, (a, b) in {"1 vs 1": one, "16 vs 16": many, "1 vs 16": (one[0], many[0])}.items():
            row = compare(a, b)
            out[f"{kind}: {pair}"] = row
            print(
                f"{kind:5} {pair:8}: same text {row['same_text']}/{row['of']}, "
                f"max |Δ logprob| where the same {row['max_abs_logprob_diff']:.3g}",
                file=sys.stderr,
            )
    if args.json:
        print(json.dumps({"engine": url, "prompts": args.prompts, "max_tokens": args.max_tokens, "pairs": out}))


if __name__ == "__main__":
    main()
