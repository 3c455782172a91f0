"""Does an engine give a request the same tokens and logprobs whatever else it is batching?

    $TEMPO_RL_PYTHON bench/engine-invariance.py --engine URL [--prompts 24] [--max-tokens 48] [--context-words 0]
        [--kinds text,image,pairs] [--reload DIR] [--json]

run.deterministic's engines must (docs/certification.md): a retried turn is generated again beside other
requests than the first time. Each of N seeded chat prompts is sent twice one at a time and twice 16 at
once (started 30 ms apart, so that prompts are computed beside others' decoding), text-only and with a
generated diagram (the image goes through the engine's vision tower, which batches the images of the
requests it schedules together), and the four answers of each are compared: the same tokens, and the
largest |Δ logprob| where the tokens are the same. Each image prompt is also sent alone beside 15 text
requests in flight ("image: 1 vs beside text": its decoding batched with others', its diagram through
the vision tower alone), which tells the two paths apart when "image: 1 vs 16" differs. "pairs": the
image prompts again, two seeds of each problem, as a GRPO group's samples share their diagram. Prints
one line per kind and pair, and with --json the figures as JSON.

--reload DIR (the model directory the engine serves): first a perturbed copy of DIR's weights and then
DIR's own are reloaded (the trainer's sync from disk: pause, vLLM's reload_weights, the caches reset,
resume), as a run's first sync reloads its model over the weights of the run before; the engine's
weights before and after are compared bit for bit (the worker extension's tempo_rl_weights_digest), the
answers one at a time before with those after, and the pairs above are taken on the reloaded weights."""

from __future__ import annotations

import argparse
import base64
import concurrent.futures as cf
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))

from trainer.contract import SyncWeightsInput  # noqa: E402
from trainer.weights.sync import EngineClient, sync_weights_from_disk  # noqa: E402


def diagram(i: int) -> str:
    """A small line drawing, different for each prompt, as a data: URL."""
    img = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(img)
    d.polygon([(20, 200), (200, 200), (20 + 7 * (i % 25), 30)], outline="black", width=3)
    d.text((30, 150), f"{30 + i}", fill="black")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def notes(k: int, words: int) -> str:
    """About `words` words of notes after problem k (--context-words), so that prompts and answers reach
    a multi-turn episode's lengths, where attention kernels may split their work differently."""
    return "".join(f" note {k}.{j} holds." for j in range(words // 3))


def ask(url: str, i: int, image: bool, max_tokens: int, pairs: bool = False, words: int = 0) -> tuple[str, list[float]]:
    """Prompt i, seeded by i; with pairs, prompts 2k and 2k+1 are one problem (text and diagram), as a
    GRPO group's samples are."""
    k = i // 2 if pairs else i
    text = {"type": "text", "text": f"Problem {k}: find the angle marked in the figure." + notes(k, words)}
    content = [{"type": "image_url", "image_url": {"url": diagram(k)}}, text] if image else [text]
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


def answers(
    url: str, n: int, image: bool, max_tokens: int, at_once: int, pairs: bool = False, words: int = 0
) -> list[tuple[str, list[float]]]:
    def staggered(i: int) -> tuple[str, list[float]]:
        # started 30 ms apart, so that prompts are computed beside other requests' decoding, as in a run
        time.sleep(0.03 * (i % at_once) if at_once > 1 else 0)
        return ask(url, i, image, max_tokens, pairs, words)

    with cf.ThreadPoolExecutor(at_once) as ex:
        return list(ex.map(staggered, range(n)))


def beside_text(url: str, n: int, max_tokens: int, words: int = 0) -> list[tuple[str, list[float]]]:
    """Each image prompt alone among images, its decoding beside 15 text requests started just before it."""

    def one(i: int) -> tuple[str, list[float]]:
        with cf.ThreadPoolExecutor(16) as ex:
            others = [ex.submit(ask, url, 1000 + 16 * i + j, False, max_tokens, False, words) for j in range(15)]
            time.sleep(0.03)
            mine = ex.submit(ask, url, i, True, max_tokens, False, words)
            for f in others:
                f.result()
            return mine.result()

    return [one(i) for i in range(n)]


KINDS = (("text", False, False), ("image", True, False), ("pairs", True, True))


def perturbed_copy(src: Path, dst: Path) -> None:
    """The model directory with every floating weight scaled by 1.01: other weights to reload over."""
    from safetensors.torch import load_file, save_file

    for f in src.iterdir():
        if f.suffix == ".safetensors":
            weights = {k: v * 1.01 if v.is_floating_point() else v for k, v in load_file(f).items()}
            save_file(weights, dst / f.name, metadata={"format": "pt"})
        elif f.is_file():
            shutil.copy(f, dst / f.name)


def reload_over_others(url: str, model_dir: str) -> None:
    """As a run's sync from disk: other weights (a perturbed copy) reloaded, then the model's own."""
    with tempfile.TemporaryDirectory() as other:
        perturbed_copy(Path(model_dir), Path(other))
        for version, path in ((1, other), (2, model_dir)):
            sync = SyncWeightsInput(
                run_id="invariance", weight_version=version, checkpoint=path, engines=[url], pause_mode="wait"
            )
            done = sync_weights_from_disk(sync).engines[0]
            if not done.ok:
                raise SystemExit(f"engine-invariance: the reload from {path} failed: {done.error}")


def reload_and_compare(
    url: str, n: int, max_tokens: int, model_dir: str, kinds: tuple, words: int
) -> tuple[dict, list[str]]:
    """The answers one at a time before the reload, and the names of the weights it left other than
    they were."""
    before = {kind: answers(url, n, image, max_tokens, 1, pairs, words) for kind, image, pairs in kinds}
    engine = EngineClient(url)
    weights = engine.weights_digest()
    reload_over_others(url, model_dir)
    now = engine.weights_digest()
    differ = sorted(name for name in weights if now.get(name) != weights[name])
    print(f"weights: before vs after the reload: {len(differ)} of {len(weights)} differ {differ[:8]}", file=sys.stderr)
    return before, differ


def compare(a, b) -> dict:
    same = [(x, y) for x, y in zip(a, b, strict=True) if x[0] == y[0]]
    worst = max((abs(u - v) for x, y in same for u, v in zip(x[1], y[1], strict=False)), default=0.0)
    return {"same_text": len(same), "of": len(a), "max_abs_logprob_diff": worst}


def report(out: dict[str, dict], name: str, row: dict) -> None:
    out[name] = row
    print(
        f"{name}: same text {row['same_text']}/{row['of']}, "
        f"max |Δ logprob| where the same {row['max_abs_logprob_diff']:.3g}",
        file=sys.stderr,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True)
    p.add_argument("--prompts", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--reload", metavar="DIR", help="reload other weights, then DIR's (the engine's model) first")
    p.add_argument("--context-words", type=int, default=0, help="words of notes added to every prompt")
    p.add_argument("--kinds", default="text,image,pairs", help="which of text, image, pairs")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    url, n, max_tokens, words = args.engine.rstrip("/"), args.prompts, args.max_tokens, args.context_words
    wanted = args.kinds.split(",")
    if unknown := [k for k in wanted if k not in {kind for kind, _, _ in KINDS}]:
        p.error(f"--kinds: {','.join(unknown)} is not one of text, image, pairs")
    kinds = tuple(k for k in KINDS if k[0] in wanted)
    before, differ = reload_and_compare(url, n, max_tokens, args.reload, kinds, words) if args.reload else ({}, [])
    out: dict[str, dict] = {}
    for kind, image, pairs in kinds:
        one = [answers(url, n, image, max_tokens, 1, pairs, words) for _ in range(2)]
        many = [answers(url, n, image, max_tokens, 16, pairs, words) for _ in range(2)]
        for pair, (a, b) in {"1 vs 1": one, "16 vs 16": many, "1 vs 16": (one[0], many[0])}.items():
            report(out, f"{kind}: {pair}", compare(a, b))
        if kind == "image":
            report(out, "image: 1 vs beside text", compare(one[0], beside_text(url, n, max_tokens, words)))
        if kind in before:
            report(out, f"{kind}: before vs after the reload", compare(before[kind], one[0]))
    if args.json:
        doc = {"engine": url, "prompts": n, "max_tokens": max_tokens, "context_words": words}
        doc["reloaded_from"] = args.reload
        if args.reload:
            doc["weights_differing_after_the_reload"] = differ
        print(json.dumps({**doc, "pairs": out}))


if __name__ == "__main__":
    main()
