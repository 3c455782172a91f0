"""The tiny Qwen3-VL mixture-of-experts model tempo-rl generates for itself (never downloaded).

Qwen3VLMoeForConditionalGeneration (the architecture of Qwen3-VL-30B-A3B) with the tiny model's sizes
(tiny_model.py: text hidden 64, 2 layers, 2 heads of 32 + 1 KV head, vocab 151 936, tied embeddings,
fp32; the same vision tower, tokenizer, chat template and processor files), every decoder layer a
sparse MoE block: 8 experts of intermediate size 128, top-2, a softmax router renormalised over the two
it picks (`norm_topk_prob`). Seeded: the same seed gives byte-identical files.

The fused expert tensors are written in the layout of Qwen's released checkpoints, which is what vLLM
loads (model/moe_layout.py). A separate module from tiny_model.py so that the dense model's cache key (a hash
of that file) and the warm start built on it stay as they are; its own manifest
(`tempo_rl_tiny_moe.json`), so neither generator ever takes the other's folder for its own.

    python -m trainer.generators.tiny_moe_model --out DIR [--seed N] [--tokenizer-dir DIR] [--force]

--out must be absent, empty, or the tiny MoE model of the same seed (kept); another seed's is replaced
only with --force, and a folder holding anything else (the dense tiny model too) is never touched (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .tiny_model import (
    CHAT_TEMPLATE,
    check_target,
    TEXT_CONFIG,
    VISION_CONFIG,
    _processor_configs,
    _write_json,
    _write_tokenizer,
    build_beside,
    checked_tokenizer_dir,
    generator_parser,
    parse_generator_args,
    run_generator,
    swap_in,
    write_generation_config,
)

NUM_EXPERTS = 8
TOP_K = 2
# moe_intermediate_size: a multiple of 64, which vLLM's CPU MoE kernel needs (it zero-pads other sizes up
# to one, and then its in-place weight reload — the engines' weight sync — fails on the padded shape:
# "size of tensor a (128) must match … b (96)" with 48); and neither hidden/2 nor hidden, so the two
# layouts of the fused expert tensors ([E, 256, 64] or [E, 64, 256]; [E, 64, 128] or [E, 128, 64]) can
# never be taken for each other (model/moe_layout.py).
MOE_TEXT_CONFIG = {
    **TEXT_CONFIG,
    "moe_intermediate_size": 128,
    "num_experts": NUM_EXPERTS,
    "num_experts_per_tok": TOP_K,
    # vLLM's Qwen3 MoE block reads it (renormalize=); transformers' Qwen3-VL-MoE router always renormalises
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}
MANIFEST = "tempo_rl_tiny_moe.json"


def _write_weights(out: Path, seed: int) -> None:
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    from ..model.moe_layout import to_checkpoint_layout

    config = Qwen3VLMoeConfig(
        text_config=dict(MOE_TEXT_CONFIG), vision_config=dict(VISION_CONFIG), tie_word_embeddings=True
    )
    config.architectures = ["Qwen3VLMoeForConditionalGeneration"]
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = Qwen3VLMoeForConditionalGeneration(config).to(torch.float32).eval()
    model.config.dtype = "float32"
    model.save_pretrained(out, safe_serialization=True)
    to_checkpoint_layout(out)
    write_generation_config(out)


def existing_seed(out_dir: Path) -> int | None:
    """The seed of the complete tiny MoE model at out_dir, or None when there is none."""
    try:
        if not (out_dir / ".complete").exists():
            return None
        return int(json.loads((out_dir / MANIFEST).read_text())["seed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check_target(out_dir: Path, seed: int, force: bool) -> bool:
    return check_target(out_dir, existing_seed, seed, force, "tiny MoE model", lambda s: f"seed {s}")


def build_tiny_moe_model(out_dir: Path, seed: int = 0, tokenizer_dir: Path | None = None, force: bool = False) -> Path:
    """Writes the model to out_dir (built in a sibling temp dir, then renamed) and returns it; a complete
    model of the same seed there is kept as it is (tiny_model.build_tiny_model's rules)."""
    out_dir = Path(out_dir)
    if _check_target(out_dir, seed, force):
        return out_dir
    tokenizer_dir = checked_tokenizer_dir(tokenizer_dir)

    def write(tmp: Path) -> None:
        _write_weights(tmp, seed)
        _write_tokenizer(tmp, tokenizer_dir, CHAT_TEMPLATE.read_text())
        for name, value in _processor_configs().items():
            _write_json(tmp / name, value)
        _write_json(
            tmp / MANIFEST,
            {"seed": seed, "generator": "trainer.generators.tiny_moe_model", "experts": NUM_EXPERTS, "top_k": TOP_K},
        )
        (tmp / ".complete").write_text("ok\n")

    build_beside(out_dir, write, lambda tmp: _swap_in(tmp, out_dir, seed, force))
    return out_dir


def _swap_in(tmp: Path, out_dir: Path, seed: int, force: bool) -> None:
    swap_in(tmp, out_dir, lambda: _check_target(out_dir, seed, force), lambda d: existing_seed(d) == seed)


def main(argv: list[str] | None = None) -> None:
    parser = generator_parser(
        "generate tempo-rl's tiny Qwen3-VL-MoE model", "replace a tiny MoE model of another seed at --out"
    )
    args = parse_generator_args(parser, argv)
    run_generator(
        "tiny_moe_model",
        lambda: build_tiny_moe_model(args.out, seed=args.seed, tokenizer_dir=args.tokenizer_dir, force=args.force),
    )


if __name__ == "__main__":
    main()
