"""Attention over a packed row on a GPU: torch's variable-length flash attention.

torch.nn.attention.varlen.varlen_attn takes the packed tokens as (T, heads, dim) and the samples'
bounds as cumulative lengths, so each sample attends to itself with no [T, T] mask — the packed
path's alternative to a dense block-diagonal mask, which SDPA would run on its slower masked kernel.
It is registered with transformers' AttentionInterface under NAME for the language model (causal),
and set on a Qwen-VL vision tower's blocks (use_on_vision: each image's patches attend to each
other). Its signature changed between torch releases (`is_causal` in 2.10/2.11; `window_size`,
`scale`, `enable_gqa` later): both are handled here. It runs in the autocast dtype (bf16); fp32 compute on a GPU, which flash attention
cannot do, falls back to SDPA under a block-diagonal mask. CPU runs use transformers' packed-sequence
mask instead."""

from __future__ import annotations

import functools
import inspect
import sys

import torch

from .device import to_device

NAME = "tempo_rl_varlen"


def _load():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None, frozenset()
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


# Resolved once at import: the attention function runs inside torch.compile'd decoder layers.
_VARLEN, _PARAMS = _load()


def available(device: torch.device) -> bool:
    return device.type == "cuda" and _VARLEN is not None


def _attention(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
):
    """transformers' attention-function signature: query/key/value (1, heads, T, dim) → (1, T, heads, dim)."""
    cu, max_len = kwargs.get("cu_seq_lens_q"), kwargs.get("max_length_q")
    if cu is None or query.shape[0] != 1:  # not a packed row (a data-parallel rank's idle pass): SDPA
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, heads, dim)
    return packed_attention(q, k, v, cu, max_len, scaling, causal)[None], None


def packed_attention(q, k, v, cu: torch.Tensor, max_len: int, scaling: float | None, causal: bool) -> torch.Tensor:
    """Each sample of a packed row attending to itself: q, k, v (T, heads, dim) → (T, heads, dim); causal
    for a decoder, not for a vision tower's patches."""
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else q.dtype
    if dtype not in (torch.float16, torch.bfloat16) or _VARLEN is None:
        return _masked_sdpa(q, k, v, cu, scaling, causal)
    # autocast does not reach a custom op: q and k come out of the fp32 rotary embedding
    q, k, v = (t.to(dtype) for t in (q, k, v))
    extra: dict = {}
    if k.shape[1] != q.shape[1]:
        if "enable_gqa" in _PARAMS:
            extra["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if scaling is not None:
        if "scale" in _PARAMS:
            extra["scale"] = scaling
        else:  # the kernel's own scale is dim^-½
            q = q * (scaling * q.shape[-1] ** 0.5)
    if "window_size" in _PARAMS:
        extra["window_size"] = (-1, 0) if causal else (-1, -1)
    else:
        extra["is_causal"] = causal
    return _VARLEN(q, k, v, cu, cu, max_len, max_len, **extra)


def _masked_sdpa(q, k, v, cu: torch.Tensor, scaling: float | None, causal: bool) -> torch.Tensor:
    """fp32 compute (flash attention has no fp32 kernel): SDPA under a block-diagonal mask, (T, heads, dim)."""
    seq = torch.repeat_interleave(torch.arange(len(cu) - 1, device=cu.device), cu.diff())
    mask = seq[:, None] == seq[None, :]
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (heads, T, dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.tril() if causal else mask, scale=scaling
    )
    return out.transpose(0, 1)


def _register() -> None:
    from transformers import AttentionInterface

    # No mask function is registered on purpose: for an attention without one, transformers builds no
    # mask and skips looking for sample boundaries in the position ids (a device→host sync per
    # forward); the bounds travel as cu_seq_lens instead.
    AttentionInterface.register(NAME, _attention)


def use_on(model: torch.nn.Module) -> bool:
    """Switch the model's language model to varlen attention when the device has it; True if it did."""
    device = next(model.parameters()).device
    if not available(device):
        return False
    _register()
    model.set_attn_implementation({"text_config": NAME} if hasattr(model.config, "vision_config") else NAME)
    return True


def use_on_vision(model: torch.nn.Module) -> int:
    """The vision tower's blocks attend through packed_attention too: all of a micro-batch's images in
    one kernel call. Under SDPA, transformers' Qwen-VL vision attention splits the patches image by
    image (a host sync for the lengths, then one SDPA call an image, in each of the 24 blocks, forward
    and recompute): on the 2B shape the tower took a third to 43% of the train phase, and packed, a
    64-sample step trains 1.45× as fast (docs/benchmarks.md). Set on the blocks
    whose attention has the Qwen-VL layout (a fused qkv, proj, num_heads, scaling, the module's own
    apply_rotary_pos_emb_vision); others keep theirs. Returns the blocks set."""
    visual = getattr(getattr(model, "model", model), "visual", None)
    longest = _LongestSample()
    count = 0
    for block in getattr(visual, "blocks", []):
        attn = getattr(block, "attn", None)
        rotary = getattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb_vision", None)
        if rotary is None or not all(hasattr(attn, a) for a in ("qkv", "proj", "num_heads", "scaling")):
            continue
        attn.forward = functools.partial(_vision_attention, attn, rotary, longest)
        count += 1
    return count


class _LongestSample:
    """The longest sample of cumulative bounds, read to the host once for all the blocks that share them."""

    def __init__(self) -> None:
        self._cu: torch.Tensor | None = None
        self._longest = 0

    def __call__(self, cu: torch.Tensor) -> int:
        if cu is not self._cu:
            self._cu, self._longest = cu, int(cu.diff().max())
        return self._longest


def _vision_attention(
    module, rotary, longest: _LongestSample, hidden_states, cu_seqlens, position_embeddings=None, **_
):
    """Qwen-VL's vision attention (qkv, the 2-D rotary embedding, attention within each image, proj)
    over every image of the forward at once."""
    seq = hidden_states.shape[0]
    q, k, v = module.qkv(hidden_states).reshape(seq, 3, module.num_heads, -1).unbind(1)  # (T, heads, dim)
    cos, sin = position_embeddings
    q, k = rotary(q, k, cos, sin)
    out = packed_attention(q, k, v, cu_seqlens, longest(cu_seqlens), module.scaling, causal=False)
    return module.proj(out.reshape(seq, -1))


def in_use(model: torch.nn.Module) -> bool:
    text = getattr(model.config, "text_config", model.config)
    return getattr(text, "_attn_implementation", None) == NAME


def sequence_bounds(lengths: list[int], device: torch.device) -> dict:
    """The packed row's sample bounds, under the keyword names transformers passes down to attention."""
    cu = to_device(torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32), device)
    longest = max(lengths)
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
