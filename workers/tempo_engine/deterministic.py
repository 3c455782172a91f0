"""run.deterministic on a GPU: the attention backend and the KV-cache bound it needs.

vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1, set by supervise/engines.ts) leaves the attention
backend to vLLM, which picks FLASH_ATTN on Hopper. At a multi-turn episode's lengths FLASH_ATTN is not
batch-invariant: prompts of ~2,600 tokens answered one at a time and sixteen at once differ by up to 0.002
in logprob (bench/engine-invariance.py --context-words 900), and a certification's runs then differ in
the engine's logprobs of the same tokens. FlexAttention answers the same to the bit there, and the
certification's runs are identical with it (docs/certification.md "On a GPU").

FlexAttention's Triton kernel addresses a layer's paged K/V with int32 offsets: from 2**31 elements in one
layer's cache it crashes at start ("an illegal memory access") or, where the address it wraps to is
mapped, reads the wrong memory without an error (https://github.com/vllm-project/vllm/issues/50427). A
model with few, narrow KV heads reaches that on a large card (the tiny Qwen3-VL: 8 GiB starts, 16 GiB
crashes), so the cache is bounded here.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tempo_engine.argv import flag_value, model_config

ATTENTION_BACKEND = "FLEX_ATTENTION"
# FlexAttention's largest addressable element offset in one layer's cache, plus one (vLLM #50427)
FLEX_MAX_ELEMENTS = 2**31
# vLLM's default block size on CUDA
DEFAULT_BLOCK_SIZE = 16
UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


class DeterministicError(SystemExit):
    """A command line run.deterministic cannot run as certified: the server exits, saying why."""

    def __init__(self, message: str):
        super().__init__(f"tempo-rl engine: {message}")


def _text_config(argv: list[str]) -> dict | None:
    """The language model's part of the served model's config.json, or None."""
    config = model_config(argv)
    return config.get("text_config", config) if config is not None else None


def _kv_element_bytes(argv: list[str]) -> int:
    if (flag_value(argv, "--kv-cache-dtype") or "").startswith("fp8"):
        return 1
    return 4 if flag_value(argv, "--dtype") in ("float32", "float") else 2


def kv_cache_bound(argv: list[str]) -> int | None:
    """The largest KV cache in bytes whose every layer FlexAttention can address, for the served model;
    None where its config.json does not say."""
    text = _text_config(argv)
    try:
        heads = int(text["num_key_value_heads"])
        head_dim = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])
        layers = int(text["num_hidden_layers"])
        block = int(flag_value(argv, "--block-size") or DEFAULT_BLOCK_SIZE)
    except (TypeError, KeyError, ValueError, ZeroDivisionError):
        return None
    # a block's K and V of one layer, as FlexAttention lays them out (interleaved per block)
    per_block = block * 2 * heads * head_dim
    return (FLEX_MAX_ELEMENTS // per_block) * per_block * _kv_element_bytes(argv) * layers


def parse_bytes(value: str) -> int:
    """vLLM's --kv-cache-memory-bytes: a number, with an optional k/m/g/t (powers of 1000) or ki/mi/gi/ti."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*", value.lower())
    if not m:
        raise DeterministicError(
            f"--kv-cache-memory-bytes {value!r}: expected a number of bytes (e.g. 8589934592 or 8Gi)"
        )
    return int(float(m.group(1)) * UNITS[m.group(2) or ""])


def first_gpu_bytes(env: dict[str, str]) -> int | None:
    """The total memory of the first GPU this engine sees (NVML, which initializes no CUDA context)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            visible = env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
            handle = (
                pynvml.nvmlDeviceGetHandleByIndex(int(visible))
                if visible.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(visible)
            )
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no GPU of that index: the bound is then always set
        return None


def batch_invariant(argv: list[str], env: dict[str, str], gpu_bytes: Callable[[], int | None]) -> tuple[list[str], str]:
    """The command line of a batch-invariant engine: FlexAttention unless the user chose a backend, and
    a KV cache FlexAttention can address; and the sentence the engine logs about it ("" when not
    batch-invariant)."""
    if env.get("VLLM_BATCH_INVARIANT") != "1":
        return argv, ""
    chosen = flag_value(argv, "--attention-backend")
    if chosen is not None and chosen.upper() != ATTENTION_BACKEND:
        return argv, f"run.deterministic with --attention-backend {chosen} (the user's; certified: {ATTENTION_BACKEND})"
    out = argv if chosen is not None else [*argv, "--attention-backend", ATTENTION_BACKEND]
    bound = kv_cache_bound(argv)
    said = f"run.deterministic: {ATTENTION_BACKEND} (batch-invariant at a run's lengths; docs/certification.md)"
    if bound is None:
        return out, f"{said}; the model's config.json does not give its KV heads: the KV cache is not bounded"
    given = flag_value(argv, "--kv-cache-memory-bytes")
    if given is not None:
        if parse_bytes(given) > bound:
            raise DeterministicError(
                f"--kv-cache-memory-bytes {given} is more than {ATTENTION_BACKEND} can address for this model"
                f" ({bound} bytes: a layer's cache must stay under 2**31 elements, vLLM #50427); give at most {bound}"
            )
        return out, said
    utilization = float(flag_value(argv, "--gpu-memory-utilization") or 0.9)
    total = gpu_bytes()
    if total is not None and utilization * total <= bound:
        return out, said
    return [*out, "--kv-cache-memory-bytes", str(bound)], f"{said}; its KV cache bounded at {bound} bytes (vLLM #50427)"
