"""FSDP2 (`fully_shard`) over the policy, shaped for policy.forward_response.

Units: each text decoder layer is its own unit (gathered for its forward, freed after); everything
else — embeddings and the tied LM head, final norm, the vision tower — is the root unit. The root is
gathered when the backbone runs and stays gathered until its backward (reshard_after_forward=False),
because forward_response calls `model.model(...)` and then reads `model.lm_head.weight` directly,
outside any forward. `ShardedPolicy` is what forward_response receives: its `.model(...)` runs the
backbone through the root's FSDP hooks (register_fsdp_forward_method).

Two rules of FSDP2 that data parallelism over uneven shares must keep:
- every rank runs the same number of forwards and backwards (each gathers and reduces): a rank with
  fewer micro-batches than the others runs `idle_pass`es;
- every backward reduces the same parameters on every rank (FSDP2 reduces only gradients that exist):
  a rank whose micro-batch has no image would leave the vision tower without gradients while another
  has them, so the root's parameters are anchored into every forward's graph with weight 0;
- images encoded ahead of several micro-batches (image_features.py) go through `encode_images`, a
  forward of the root, and their tower backward rides on a micro-batch's backward or one idle pass
  more that every rank makes: the same collectives on every rank, in the same order.

Gradients are summed across ranks, not averaged (divide factor 1): each rank's loss is already its
part of the whole step's loss (worker/data_parallel.py normalises over every rank's tokens)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor

from .gpu_setup import decoder_layers

BACKBONE_METHOD = "tempo_rl_backbone"
ENCODE_METHOD = "tempo_rl_encode_images"


def shard_policy(model: torch.nn.Module) -> torch.nn.Module:
    """Shards `model` in place over the default process group (one shard per rank) and returns it."""
    for layer in decoder_layers(model):
        fully_shard(layer)
    fully_shard(model, reshard_after_forward=False)

    def backbone(**kwargs):
        out = model.model(**kwargs)
        # Gathered (plain) tensors now: the root's parameters; the layers' are sharded DTensors again.
        anchor = sum(p.reshape(-1)[:1].sum() for p in model.parameters() if not isinstance(p, DTensor))
        out.last_hidden_state = out.last_hidden_state + 0.0 * anchor
        return out

    def encode_images(pixels: torch.Tensor, grids: torch.Tensor, **kwargs):
        return model.model.get_image_features(pixels, grids, **kwargs)

    # Instance attributes, not submodules or parameters: FSDP wraps each as a forward of the root.
    for name, method in ((BACKBONE_METHOD, backbone), (ENCODE_METHOD, encode_images)):
        object.__setattr__(model, name, method)
        register_fsdp_forward_method(model, name)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            # A plain SUM: gloo has no PREMUL_SUM (NCCL, which has it, also runs torch versions without this setter).
            if hasattr(module, "set_force_sum_reduction_for_comms"):
                module.set_force_sum_reduction_for_comms(True)
    return model


class _Backbone:
    def __init__(self, module: torch.nn.Module):
        self._module = module

    def __call__(self, **kwargs):
        return getattr(self._module, BACKBONE_METHOD)(**kwargs)

    def __getattr__(self, name: str):  # get_rope_index and the like: the backbone's own
        return getattr(self._module.model, name)


class ShardedPolicy:
    """The sharded model as forward_response uses it; everything but `.model` is the model's own."""

    # The root's parameters (the vision tower's among them) are gathered only inside its forward:
    # a micro-batch's images go through the encoder there (packing.py); images encoded ahead for
    # several micro-batches go through encode_images, a forward of the root (image_features.py).
    encodes_images_in_forward = True

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def encode_images(self, pixels: torch.Tensor, grids: torch.Tensor, **kwargs):
        """The model's get_image_features with the root's parameters gathered: a collective, as the
        micro-batch's own forward that follows would have made it (that one then finds them gathered)."""
        return getattr(self.module, ENCODE_METHOD)(pixels, grids, **kwargs)

    @property
    def backbone_module(self) -> torch.nn.Module:
        """The model's own backbone (whose get_image_features the forward calls)."""
        return self.module.model

    def __getattr__(self, name: str):
        return getattr(self.module, name)

    @property
    def model(self) -> _Backbone:
        return _Backbone(self.module)


def idle_pass(
    policy: ShardedPolicy, device: torch.device, backward: bool, before_backward: Callable[[], None] | None = None
) -> None:
    """A forward (and a backward) of one token with loss 0: the collectives of a micro-batch, no gradient.
    before_backward: runs while the root's parameters are gathered (its gradients join this backward's)."""
    ids = torch.zeros((1, 1), dtype=torch.long, device=device)
    with torch.set_grad_enabled(backward):
        hidden = policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        if backward:
            if before_backward is not None:
                before_backward()
            (hidden.sum() * 0.0).backward()


def reshard(model: torch.nn.Module) -> None:
    """Frees the root's gathered parameters (left gathered by a forward without backward)."""
    if isinstance(model, FSDPModule):
        model.reshard()


def grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """clip_grad_norm_ over the sharded gradients: the norm of the whole model, the same on every rank."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    return float(norm)
