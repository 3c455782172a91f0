"""Attention over a packed row on a GPU: torch's variable-length flash attention.

torch.nn.attention.varlen.varlen_attn takes the packed tokens as (T, heads, dim) and the samples'
bounds as cumulative lengths, so each sample attends causally to itself with no [T, T] mask — the
packed path's alternative to a dense block-diagonal mask, which SDPA would run on its slower
masked kernel. It is registered with transformers' AttentionInterface under NAME and set on the
language model only (a VLM's vision tower keeps its own attention). Its signature changed between
torch releases (`is_causal` in 2.10/2.11; `window_size`, `scale`, `enable_gqa` later): both are
handled here. It runs in the autocast dtype (bf16); fp32 compute on a GPU, which flash attention
cannot do, falls back to SDPA under a block-diagonal mask. CPU runs use transformers' packed-sequence
mask instead."""

from __future__ import annotations

import inspect

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
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else query.dtype
    if dtype not in (torch.float16, torch.bfloat16):
        return _masked_sdpa(query, key, value, cu, scaling)
    # autocast does not reach a custom op: q and k come out of the fp32 rotary embedding
    q, k, v = (t[0].transpose(0, 1).to(dtype) for t in (query, key, value))  # (T, heads, dim)
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
        extra["window_size"] = (-1, 0)  # causal
    else:
        extra["is_causal"] = True
    out = _VARLEN(q, k, v, cu, cu, max_len, max_len, **extra)
    return out[None], None


def _masked_sdpa(query, key, value, cu: torch.Tensor, scaling: float | None):
    """fp32 compute (flash attention has no fp32 kernel): SDPA under a block-diagonal causal mask."""
    seq = torch.repeat_interleave(torch.arange(len(cu) - 1, device=cu.device), cu.diff())
    mask = (seq[:, None] == seq[None, :]).tril()
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2), None


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


def in_use(model: torch.nn.Module) -> bool:
    text = getattr(model.config, "text_config", model.config)
    return getattr(text, "_attn_implementation", None) == NAME


def sequence_bounds(lengths: list[int], device: torch.device) -> dict:
    """The packed row's sample bounds, under the keyword names transformers passes down to attention."""
    cu = to_device(torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32), device)
    longest = max(lengths)
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
