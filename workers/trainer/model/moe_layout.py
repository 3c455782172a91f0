"""The on-disk layout of fused MoE expert tensors that vLLM reads.

Qwen's released Qwen3-VL-MoE checkpoints store each layer's experts as two fused tensors,
`mlp.experts.gate_up_proj` [E, hidden, 2·I] and `mlp.experts.down_proj` [E, I, hidden]. vLLM 0.32
loads them as such (qwen3_vl_moe.py: `is_fused_checkpoint_transposed=True`, it transposes them to its
[E, 2·I, hidden] / [E, hidden, I]), and transformers 5 converts them on load (a `Transpose(1, 2)`
weight converter with `check_dims`: it also takes its own layout as it is). But transformers'
`save_pretrained` writes its in-memory layout, [E, 2·I, hidden] / [E, hidden, I], which vLLM then
transposes once too many — a shape error at best, scrambled experts when hidden = 2·I.

`to_checkpoint_layout(model_dir)` rewrites a saved model directory's fused expert tensors into the
released layout (the generator of the tiny MoE model and every checkpoint the trainer writes for the
engines go through it); a directory already in that layout, or without fused experts, is left as is.
"""

from __future__ import annotations

import json
from pathlib import Path

# model types whose fused experts vLLM reads transposed (transformers has a Transpose(1, 2) converter for them)
TRANSPOSED_FUSED_EXPERTS = {"qwen3_vl_moe"}
_FUSED = (".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")


def _text_config(config: dict) -> dict:
    return config.get("text_config") or config


def needs_checkpoint_layout(config: dict) -> bool:
    return config.get("model_type") in TRANSPOSED_FUSED_EXPERTS


def _released_shape(name: str, shape: tuple[int, ...], hidden: int, inter: int) -> bool | None:
    """True when the tensor already is in the released layout, False when in transformers' layout,
    None when it is neither (left alone). When both read the same (hidden = 2·I for gate_up, or
    hidden = I for down_proj), it is what save_pretrained writes: transformers' layout."""
    e, a, b = shape
    if name.endswith("gate_up_proj"):
        released, internal = (hidden, 2 * inter), (2 * inter, hidden)
    else:
        released, internal = (inter, hidden), (hidden, inter)
    if (a, b) == internal:
        return False
    if (a, b) == released:
        return True
    return None


def released_layout(name: str, tensor, model_type: str | None):
    """An in-memory weight (transformers' layout) as the released checkpoint holds it: what the engines
    load when weights reach them without a file (weights/ipc.py). A transposed view, no copy."""
    if model_type in TRANSPOSED_FUSED_EXPERTS and name.endswith(_FUSED):
        return tensor.transpose(1, 2)
    return tensor


def to_checkpoint_layout(model_dir: str | Path) -> list[str]:
    """Rewrites the fused expert tensors of `model_dir`'s safetensors files into the released layout;
    returns the names of the tensors it transposed."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    if not needs_checkpoint_layout(config):
        return []
    text = _text_config(config)
    hidden, inter = int(text["hidden_size"]), int(text["moe_intermediate_size"])
    changed: list[str] = []
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            metadata = f.metadata()
            names = list(f.keys())
            flips = [
                n
                for n in names
                if n.endswith(_FUSED) and _released_shape(n, tuple(f.get_slice(n).get_shape()), hidden, inter) is False
            ]
            if not flips:
                continue
            tensors = {n: f.get_tensor(n) for n in names}
        for n in flips:
            tensors[n] = tensors[n].transpose(1, 2).contiguous()
        tmp = path.with_name(path.name + ".tmp")
        save_file(tensors, tmp, metadata=metadata or {"format": "pt"})
        tmp.replace(path)
        changed += flips
    return changed
