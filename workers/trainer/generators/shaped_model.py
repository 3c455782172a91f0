"""Qwen3-VL models with a public model's sizes and random weights, generated here (never downloaded).

For measuring what depends on size alone — GPU weight transfer, logprob parity between trainer and
engine, the time and memory of a GRPO step — at a realistic size. The weights are noise, so the model
says nothing useful; everything else is the real thing: the architecture
(Qwen3VLForConditionalGeneration), the sizes, the tokenizer and chat template of the tiny model
(tiny_model.py), its generation config, and the real Qwen3-VL image and video processor limits.

    python -m trainer.generators.shaped_model --shape qwen3-vl-2b --out DIR [--seed N] [--dtype bfloat16|float32]
        [--device cpu|cuda] [--tokenizer-dir DIR] [--force]

Shapes (SHAPES; add a dict to add one):

  qwen3-vl-2b — the sizes of Qwen/Qwen3-VL-2B-Instruct, from its public config.json,
  preprocessor_config.json and video_preprocessor_config.json:
    https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct/blob/main/config.json
    https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct/blob/main/preprocessor_config.json
    https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct/blob/main/video_preprocessor_config.json
  Text: hidden 2048, 28 layers, 16 heads of 128, 8 KV heads, MLP 6144, vocab 151 936, 262 144
  positions, rope theta 5e6 with interleaved mrope sections [24, 20, 20], tied embeddings. Vision: 24
  blocks of hidden 1024, 16 heads, MLP 4096, out 2048, deepstack after blocks 5, 11 and 17, 2304
  learned positions, patch 16, merge 2, temporal patch 2. Images: 65 536 to 16 777 216 pixels
  (64 to 16 384 merged tokens); videos: 4096 to 25 165 824; mean and std 0.5. 2 127 532 032
  parameters: 4.26 GB in bfloat16, one safetensors file, as the published checkpoint.

Weights: normal(0, initializer_range) for linear, convolution and embedding weights, zero biases,
norms at one — what transformers' default initialisation writes — drawn tensor by tensor from a
generator seeded by (seed, tensor name), on --device (default: cuda when there is one). The model is
built on the meta device only to list its tensors, so no slow per-module initialisation runs on the
CPU. Values are drawn in float32 and then cast, so a bfloat16 model is its float32 twin rounded. The
same seed gives byte-identical files on the same kind of device; CPU and CUDA generators draw
different numbers (the manifest records which one drew them).

--out must be absent, empty, or a shaped model of the same shape, seed and dtype (kept as it is,
whichever device drew it); another shaped model is replaced only with --force, and a folder holding
anything else — the tiny models too — is never touched (exit 2). Files are written to a sibling temp
folder and renamed into place, as tiny_model.py does; its refusal helpers are keyed to its own
manifest, so the same rules are restated here for `tempo_rl_shaped.json`.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from .tiny_model import (
    CHAT_TEMPLATE,
    check_target,
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

MANIFEST = "tempo_rl_shaped.json"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# save_pretrained's default shard size: a 2B model stays one file, like the published checkpoint
MAX_SHARD_SIZE = "50GB"

SHAPES: dict[str, dict] = {
    "qwen3-vl-2b": {
        "source": "https://huggingface.co/Qwen/Qwen3-VL-2B-Instruct",
        "text_config": {
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_act": "silu",
            "attention_bias": False,
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "initializer_range": 0.02,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "tie_word_embeddings": True,
            # the published file (transformers 4.57) spells these rope_scaling + rope_theta
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5000000.0,
                "mrope_section": [24, 20, 20],
                "mrope_interleaved": True,
            },
        },
        "vision_config": {
            "depth": 24,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_heads": 16,
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 2048,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [5, 11, 17],
            "initializer_range": 0.02,
        },
        "tie_word_embeddings": True,
        "token_ids": {
            "image_token_id": 151655,
            "video_token_id": 151656,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
        },
        # pixels per image / per video (size.shortest_edge, size.longest_edge of the two processor files)
        "image_pixels": [65536, 16777216],
        "video_pixels": [4096, 25165824],
    },
}


class _Tensor:
    """One tensor to write: its name, shape and how transformers would initialise it."""

    __slots__ = ("name", "shape", "rule", "std", "zero_row")

    def __init__(self, name: str, shape: tuple[int, ...], rule: str, std: float = 0.0, zero_row: int | None = None):
        self.name, self.shape, self.rule, self.std, self.zero_row = name, shape, rule, std, zero_row


def _config(spec: dict, dtype: str):
    from transformers import Qwen3VLConfig

    config = Qwen3VLConfig(
        text_config=dict(spec["text_config"]),
        vision_config=dict(spec["vision_config"]),
        tie_word_embeddings=spec["tie_word_embeddings"],
        **spec.get("token_ids", {}),
    )
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    config.dtype = dtype
    return config


def _rule(module: torch.nn.Module, param_name: str) -> str:
    """transformers' PreTrainedModel._init_weights, as a name: 'normal', 'zeros' or 'ones'."""
    if isinstance(module, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Embedding)):
        return "normal" if param_name == "weight" else "zeros"
    kind = type(module).__name__
    if "LayerNorm" in kind or "RMSNorm" in kind:
        return "ones" if param_name == "weight" else "zeros"
    # a parameter no rule covers would be written as garbage; better to stop and add its rule
    raise ValueError(f"no initialisation rule for {kind}.{param_name}")


def _tensor_plan(config) -> list[_Tensor]:
    """Every tensor the checkpoint holds, in save_pretrained's order, without allocating any."""
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    text_std = config.text_config.initializer_range
    vision_std = config.vision_config.initializer_range
    plan, seen = [], set()
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if id(param) in seen:  # tied: lm_head.weight is the embedding, saved once under its name
                continue
            seen.add(id(param))
            name = f"{module_name}.{param_name}" if module_name else param_name
            std = vision_std if name.startswith("model.visual.") else text_std
            pad = getattr(module, "padding_idx", None) if isinstance(module, torch.nn.Embedding) else None
            plan.append(_Tensor(name, tuple(param.shape), _rule(module, param_name), std, pad))
    return plan


def _tensor_seed(seed: int, name: str) -> int:
    # one generator per tensor: a tensor's values depend on the seed and its name only, not on the
    # order tensors are drawn in or on how they are grouped into shards
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def _draw(t: _Tensor, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if t.rule == "zeros":
        return torch.zeros(t.shape, dtype=dtype)
    if t.rule == "ones":
        return torch.ones(t.shape, dtype=dtype)
    gen = torch.Generator(device=device).manual_seed(_tensor_seed(seed, t.name))
    value = torch.empty(t.shape, dtype=torch.float32, device=device).normal_(0.0, t.std, generator=gen)
    if t.zero_row is not None:
        value[t.zero_row].zero_()
    return value.to(dtype).cpu()


def _shards(plan: list[_Tensor], dtype: torch.dtype, max_shard_size: int | str):
    """save_pretrained's file names and grouping (huggingface_hub's splitter), planned on meta tensors."""
    from huggingface_hub import split_torch_state_dict_into_shards

    meta = {t.name: torch.empty(t.shape, dtype=dtype, device="meta") for t in plan}
    return split_torch_state_dict_into_shards(meta, max_shard_size=max_shard_size)


def _write_weights(
    out: Path, plan: list[_Tensor], seed: int, dtype: torch.dtype, device: torch.device, max_shard_size
) -> None:
    from safetensors.torch import save_file

    by_name = {t.name: t for t in plan}
    split = _shards(plan, dtype, max_shard_size)
    for filename, names in split.filename_to_tensors.items():
        tensors = {name: _draw(by_name[name], seed, dtype, device) for name in names}
        save_file(tensors, str(out / filename), metadata={"format": "pt"})
        del tensors  # one shard in memory at a time
    if split.is_sharded:
        total = sum(torch.Size(t.shape).numel() for t in plan) * torch.empty((), dtype=dtype).element_size()
        _write_json(
            out / "model.safetensors.index.json",
            {"metadata": {"total_size": total}, "weight_map": split.tensor_to_filename},
        )


def _write_tokenizer_files(out: Path, tokenizer_dir: Path, spec: dict) -> None:
    _write_tokenizer(out, tokenizer_dir, CHAT_TEMPLATE.read_text())
    # tiny_model caps the context at its own 32k positions; this shape has more
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["model_max_length"] = spec["text_config"]["max_position_embeddings"]
    _write_json(path, config)


def _processor_files(spec: dict) -> dict[str, dict]:
    """The tiny model's processor files with the shape's pixel limits in place of its 4-16 patch ones."""
    files = _processor_configs()
    image, video = files["preprocessor_config.json"], files["video_preprocessor_config.json"]
    image["size"] = {"shortest_edge": spec["image_pixels"][0], "longest_edge": spec["image_pixels"][1]}
    video["size"] = {"shortest_edge": spec["video_pixels"][0], "longest_edge": spec["video_pixels"][1]}
    # the published video file sets no frame limits (Qwen3VLVideoProcessor's defaults apply); the tiny
    # model's 2-8 frames are a CPU economy
    for key in ("min_frames", "max_frames"):
        video.pop(key, None)
    for cfg in (image, video):
        cfg["patch_size"] = spec["vision_config"]["patch_size"]
        cfg["merge_size"] = spec["vision_config"]["spatial_merge_size"]
        cfg["temporal_patch_size"] = spec["vision_config"]["temporal_patch_size"]
    return files


def shape_spec(shape: str, layers: int | None = None) -> dict:
    """SHAPES[shape], or a shallower copy: `layers` decoder layers and vision blocks (the deepstack taps
    that remain), every width as published — what a CPU runs of a shape."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(sorted(SHAPES))})")
    spec = json.loads(json.dumps(SHAPES[shape]))
    if layers is not None:
        if layers < 1:
            raise ValueError(f"layers must be at least 1, not {layers}")
        spec["text_config"]["num_hidden_layers"] = layers
        vision = spec["vision_config"]
        vision["depth"] = min(vision["depth"], layers)
        vision["deepstack_visual_indexes"] = [i for i in vision["deepstack_visual_indexes"] if i < vision["depth"]] or [
            0
        ]
    return spec


def write_config_dir(out: Path, spec: dict, dtype: str = "float32"):
    """A shape's config and processor files, no weights and no tokenizer: the base directory of a model
    built in memory from the config (what the trainer reads beside the weights: bench/trainer.py).
    Returns the config."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = _config(spec, dtype)
    config.save_pretrained(out)
    for name, value in _processor_files(spec).items():
        _write_json(out / name, value)
    return config


def existing_identity(out_dir: Path) -> tuple[str, int, str] | None:
    """(shape, seed, dtype) of the complete shaped model at out_dir, or None when there is none."""
    try:
        if not (out_dir / ".complete").exists():
            return None
        manifest = json.loads((out_dir / MANIFEST).read_text())
        return str(manifest["shape"]), int(manifest["seed"]), str(manifest["dtype"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _describe(identity: tuple[str, int, str]) -> str:
    shape, seed, dtype = identity
    return f"{shape} seed {seed} {dtype}"


def _check_target(out_dir: Path, want: tuple[str, int, str], force: bool) -> bool:
    return check_target(out_dir, existing_identity, want, force, "shaped model", _describe)


def _swap_in(tmp: Path, out_dir: Path, want: tuple[str, int, str], force: bool) -> None:
    swap_in(tmp, out_dir, lambda: _check_target(out_dir, want, force), lambda d: existing_identity(d) == want)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _write_model(
    tmp: Path, shape: str, spec: dict, seed: int, dtype: str, device: str, tokenizer_dir: Path, max_shard_size
) -> dict:
    config = _config(spec, dtype)
    plan = _tensor_plan(config)
    started = time.monotonic()
    _write_weights(tmp, plan, seed, DTYPES[dtype], torch.device(device), max_shard_size)
    config.save_pretrained(tmp)
    write_generation_config(tmp)
    _write_tokenizer_files(tmp, tokenizer_dir, spec)
    for name, value in _processor_files(spec).items():
        _write_json(tmp / name, value)
    params = sum(torch.Size(t.shape).numel() for t in plan)
    manifest = {
        "shape": shape,
        "seed": seed,
        "dtype": dtype,
        "device": device,
        "parameters": params,
        "source": spec.get("source"),
        "generator": "trainer.generators.shaped_model",
    }
    _write_json(tmp / MANIFEST, manifest)
    (tmp / ".complete").write_text("ok\n")
    return {**manifest, "weights_s": round(time.monotonic() - started, 1)}


def build_shaped_model(
    out_dir: Path,
    shape: str = "qwen3-vl-2b",
    seed: int = 0,
    dtype: str = "bfloat16",
    device: str | None = None,
    tokenizer_dir: Path | None = None,
    force: bool = False,
    *,
    spec: dict | None = None,
    max_shard_size: int | str = MAX_SHARD_SIZE,
) -> Path:
    """Writes the model to out_dir (built in a sibling temp dir, then renamed) and returns it.

    spec defaults to SHAPES[shape]; tests pass a small one of the same form. A complete model of the
    same shape, seed and dtype at out_dir is kept as it is; another shaped model is replaced only with
    force; a non-empty folder that is no shaped model raises OutputRefused (nothing is deleted).
    """
    out_dir = Path(out_dir)
    if spec is None:
        if shape not in SHAPES:
            raise ValueError(f"unknown shape {shape!r} (known: {', '.join(sorted(SHAPES))})")
        spec = SHAPES[shape]
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    want = (shape, seed, dtype)
    if _check_target(out_dir, want, force):
        return out_dir
    device = device or default_device()
    tokenizer_dir = checked_tokenizer_dir(tokenizer_dir)
    summary: dict = {}

    def write(tmp: Path) -> None:
        summary.update(_write_model(tmp, shape, spec, seed, dtype, device, tokenizer_dir, max_shard_size))

    build_beside(out_dir, write, lambda tmp: _swap_in(tmp, out_dir, want, force))
    print(
        f"shaped_model: {summary['parameters']:,} parameters ({dtype}, drawn on {device}) in {summary['weights_s']} s",
        file=sys.stderr,
    )
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = generator_parser(
        "generate a randomly initialised Qwen3-VL model of a public model's sizes",
        "replace a shaped model of another shape, seed or dtype at --out",
    )
    parser.add_argument("--shape", required=True, choices=sorted(SHAPES))
    parser.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default=None,
        help="where the weights are drawn (default: cuda when there is one)",
    )
    args = parse_generator_args(parser, argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    run_generator(
        "shaped_model",
        lambda: build_shaped_model(
            args.out,
            shape=args.shape,
            seed=args.seed,
            dtype=args.dtype,
            device=args.device,
            tokenizer_dir=args.tokenizer_dir,
            force=args.force,
        ),
    )


if __name__ == "__main__":
    main()
