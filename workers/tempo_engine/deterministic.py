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

from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass

from tempo_engine.argv import CompatError, read_model_config

ATTENTION_BACKEND = "FLEX_ATTENTION"
# FlexAttention's largest addressable element offset in one layer's cache, plus one (vLLM #50427)
FLEX_MAX_ELEMENTS = 2**31
# vLLM's default block size on CUDA
DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class EngineFlags:
    """What vLLM's own parser read from the engine's command line (any spelling, the last one winning)."""

    model: str | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None
    attention_backend: str | None = None
    pipeline_parallel_size: int = 1

    @classmethod
    def parsed(cls, ns: Namespace) -> EngineFlags:
        backend = getattr(ns, "attention_backend", None)
        return cls(
            model=getattr(ns, "model", None),
            dtype=str(getattr(ns, "dtype", None) or "") or None,
            kv_cache_dtype=str(getattr(ns, "kv_cache_dtype", None) or "") or None,
            block_size=getattr(ns, "block_size", None),
            gpu_memory_utilization=float(getattr(ns, "gpu_memory_utilization", None) or 0.9),
            kv_cache_memory_bytes=getattr(ns, "kv_cache_memory_bytes", None),
            attention_backend=None if backend is None else str(getattr(backend, "name", backend)),
            pipeline_parallel_size=int(getattr(ns, "pipeline_parallel_size", None) or 1),
        )


def _kv_element_bytes(flags: EngineFlags) -> int:
    if (flags.kv_cache_dtype or "").startswith("fp8"):
        return 1
    return 4 if flags.dtype in ("float32", "float") else 2


def kv_cache_bound(flags: EngineFlags) -> int | None:
    """The largest KV cache in bytes (per GPU, as --kv-cache-memory-bytes counts it) whose every layer
    FlexAttention can address, for the served model; None where its config.json does not say."""
    config = read_model_config(flags.model)
    text = config.get("text_config", config) if config is not None else None
    try:
        heads = int(text["num_key_value_heads"])
        head_dim = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])
        # a pipeline stage holds its share of the layers, the smallest share the most cache a layer
        layers = max(1, int(text["num_hidden_layers"]) // flags.pipeline_parallel_size)
    except (TypeError, KeyError, ValueError, ZeroDivisionError):
        return None
    # a block's K and V of one layer (tensor parallelism splits the heads: fewer elements, a safe bound)
    per_block = (flags.block_size or DEFAULT_BLOCK_SIZE) * 2 * heads * head_dim
    return (FLEX_MAX_ELEMENTS // per_block) * per_block * _kv_element_bytes(flags) * layers


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


def is_batch_invariant(env: dict[str, str]) -> bool:
    return env.get("VLLM_BATCH_INVARIANT") == "1"


def batch_invariant(argv: list[str], flags: EngineFlags, gpu_bytes: Callable[[], int | None]) -> tuple[list[str], str]:
    """The command line of a batch-invariant engine (is_batch_invariant): FlexAttention unless the user
    chose a backend, and a KV cache FlexAttention can address; and the sentence the engine logs."""
    chosen = flags.attention_backend
    if chosen is not None and chosen.upper() != ATTENTION_BACKEND:
        return argv, f"run.deterministic with --attention-backend {chosen} (the user's; certified: {ATTENTION_BACKEND})"
    out = argv if chosen is not None else [*argv, "--attention-backend", ATTENTION_BACKEND]
    bound = kv_cache_bound(flags)
    said = f"run.deterministic: {ATTENTION_BACKEND} (batch-invariant at a run's lengths; docs/certification.md)"
    if bound is None:
        return out, f"{said}; the model's config.json does not give its KV heads: the KV cache is not bounded"
    if flags.kv_cache_memory_bytes is not None:
        if flags.kv_cache_memory_bytes > bound:
            raise CompatError(
                f"--kv-cache-memory-bytes {flags.kv_cache_memory_bytes} (as vLLM reads it) is more than"
                f" {ATTENTION_BACKEND} can address for this model ({bound} bytes: a layer's cache must stay"
                f" under 2**31 elements, vLLM #50427); give at most {bound}"
            )
        return out, said
    total = gpu_bytes()
    if total is not None and flags.gpu_memory_utilization * total <= bound:
        return out, said
    return [*out, "--kv-cache-memory-bytes", str(bound)], f"{said}; its KV cache bounded at {bound} bytes (vLLM #50427)"
