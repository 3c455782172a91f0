"""The policy's set-up for training on a GPU (policy.load_policy applies it to every model it loads):
varlen attention for packed rows and for the vision tower's images, compiled decoder layers, and the
vision tower's activations recomputed in the backward. On a CPU nothing changes (eager, SDPA, every
activation kept)."""

from __future__ import annotations

import functools
import os

import torch

from . import varlen_attention
from .routing_replay import install_replay_hooks


def for_training(model: torch.nn.Module) -> torch.nn.Module:
    """On a GPU: the language model attends through torch's variable-length flash attention (packed
    micro-batches, packing.py), a Qwen-VL vision tower's blocks too (all images in one call;
    TEMPO_RL_VISION_VARLEN=0 keeps the model's own), and its decoder layers are compiled — unless
    TEMPO_RL_COMPILE=0, the way out for a model torch.compile cannot handle — and the vision blocks
    recompute their activations in the backward (checkpoint_vision_blocks). CPU: eager, SDPA,
    everything kept."""
    try:
        install_replay_hooks(model)  # before any compile: compiled layers ignore hooks added later
    except NotImplementedError:
        pass  # routers replay cannot drive: refused by replay_routing if replay is asked for
    if next(model.parameters()).is_cuda:
        if varlen_attention.use_on(model) and os.environ.get("TEMPO_RL_VISION_VARLEN", "1") != "0":
            varlen_attention.use_on_vision(model)
        if os.environ.get("TEMPO_RL_COMPILE", "1") != "0":
            compile_decoder_layers(model)
        if os.environ.get("TEMPO_RL_VISION_CHECKPOINT", "1") != "0":
            checkpoint_vision_blocks(model)
    return model


def checkpoint_vision_blocks(model: torch.nn.Module) -> int:
    """Activation checkpointing of the vision tower's blocks: each keeps only its input for the backward
    and runs its forward again there. Through the tower's 24 blocks a patch holds ~1 MB of activations
    at the 2B shape and an image token is four patches: an image token costs about twice a text token
    (~3.6 MB through 28 layers), and grpo.micro_batch_tokens counts tokens — a row of large diagrams
    held gigabytes more than a row of text. With it a micro-batch's memory follows its tokens. The price
    is the tower's forward once more (a few % of a Geo3K step); the gradients are the same (the same
    kernels on the same inputs). TEMPO_RL_VISION_CHECKPOINT=0 keeps every activation. Returns the
    blocks set."""
    from torch.utils.checkpoint import checkpoint

    visual = getattr(getattr(model, "model", model), "visual", None)
    blocks = list(getattr(visual, "blocks", []))
    for block in blocks:
        if hasattr(block, "gradient_checkpointing"):  # transformers' GradientCheckpointingLayer
            block.gradient_checkpointing = True
            block._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=False)
    return len(blocks)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    inner = model.model
    return inner.language_model.layers if hasattr(inner, "language_model") else inner.layers


def compile_decoder_layers(model: torch.nn.Module) -> None:
    """torch.compile each decoder layer (one compiled graph, reused by every layer): RMSNorm, RoPE,
    SwiGLU and autocast's casts fuse into a few kernels instead of dozens of elementwise passes."""
    for layer in decoder_layers(model):
        layer.compile(dynamic=True)
