"""Packed micro-batches: several samples in one row, each attending only to itself.

A padded micro-batch of GRPO samples (responses of 50 to 4000 tokens) spends a third or more of its
tokens on padding, and its padding mask sends SDPA to a slower kernel. A packed one concatenates its
samples into a single row of at most `micro_batch_tokens` tokens:

- bins are filled first-fit-decreasing by length (a sample longer than the budget goes alone), the
  samples that show the same images kept together where they fit;
- position ids restart at 0 with each sample — for Qwen-VL models the 3-row M-RoPE ids of each
  sample through the model's own get_rope_index, under a 4th row of text positions, which is how
  transformers tells the samples apart (masking_utils.find_packed_sequence_indices);
- attention stays inside each sample through torch's variable-length flash attention on a GPU
  (varlen_attention.py, no L×L mask). The trainer packs only there (model.packs): a CPU pads, since
  transformers' packed-sequence mask under SDPA costs T² for the whole row; that path is what the CPU
  tests check the packed rows with;
- each distinct image (same blob) is encoded once per micro-batch, however many samples of its
  group show it, and its features are placed at every sample's placeholders (gradients add up); on a
  GPU once per segment of micro-batches instead (image_features.py).

Log-probabilities and gradients equal those of the padded path (tests/python/test_packing.py)."""

from __future__ import annotations

import inspect
import itertools
from typing import TYPE_CHECKING

import torch

from . import image_features, varlen_attention
from .device import to_device

if TYPE_CHECKING:
    from .policy import TrainSample


def pack_micro_batches(samples: list[TrainSample], token_budget: int) -> list[list[TrainSample]]:
    """Bins of samples whose summed length stays within the budget (a sample longer than the budget
    goes alone); inside a bin the samples keep their order in `samples`.

    First-fit decreasing, image group by image group: the samples showing the same images (a GRPO
    group's prompt diagram) are placed one after another, longest first, each into the fullest bin
    that already holds their images and has room, else into the first bin with room. Where images
    are encoded per bin, a group of 8 packed by length alone shows its diagram in up to 8 bins, here
    in the 2 or 3 its tokens need (on Geo3K-like steps a quarter of the encodings for ~2% more bins:
    tests/python/test_packing.py); where they are encoded once per segment of consecutive bins
    (image_features.py, on a GPU), a group's bins come one after another, so its diagram stays in one
    segment. Samples without images are groups of one: plain first-fit decreasing."""
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.image_keys or ("sample", i), []).append(i)
    bins: list[list[int]] = []
    room: list[int] = []
    holds: list[set] = []  # the image groups in each bin
    for key, members in sorted(groups.items(), key=lambda kv: -max(samples[i].n_tokens for i in kv[1])):
        for i in sorted(members, key=lambda i: -samples[i].n_tokens):
            n = samples[i].n_tokens
            sharing = [b for b, left in enumerate(room) if n <= left and key in holds[b]]
            fit = (
                min(sharing, key=room.__getitem__)
                if sharing
                else next((b for b, left in enumerate(room) if n <= left), None)
            )
            if fit is None:
                bins.append([])
                room.append(token_budget)
                holds.append(set())
                fit = len(bins) - 1
            bins[fit].append(i)
            room[fit] -= n
            holds[fit].add(key)
    return [[samples[i] for i in sorted(b)] for b in bins]


def _is_vlm(model) -> bool:
    return hasattr(model.config, "vision_config")


def _mrope_positions(model, s: TrainSample) -> torch.Tensor:
    """(3, 1, L) M-RoPE position ids of one sample, as the padded batch computes them (on the CPU)."""
    ids = torch.tensor(s.input_ids)[None]
    image_token = model.config.image_token_id
    grid = s.vision.image_grid_thw if s.vision is not None else None
    positions, _ = model.model.get_rope_index(
        input_ids=ids,
        mm_token_type_ids=(ids == image_token).to(torch.int32),
        image_grid_thw=grid,
        attention_mask=torch.ones_like(ids),
    )
    return positions


def _image_features(model, batch: list[TrainSample], device: torch.device):
    """The vision encoder run once per distinct image of the batch, its outputs listed per placeholder
    block in the row's order (what Qwen3-VL's forward takes as mm_encoder_outputs)."""
    images = image_features.distinct_images(batch)
    if not images:
        return None
    index = {key: j for j, key in enumerate(images)}
    occurrences = [index[key] for s in batch if s.vision is not None for key in image_features.image_keys(s)]
    pixels, grids = [im.pixels for im in images.values()], [im.grid for im in images.values()]
    out = model.model.get_image_features(
        to_device(torch.cat(pixels), device, model.dtype), to_device(torch.stack(grids), device), return_dict=True
    )
    out.pooler_output = tuple(out.pooler_output[j] for j in occurrences)
    out.deepstack_features = [tuple(layer[j] for j in occurrences) for layer in out.deepstack_features]
    return out


def _encodes_once(model) -> bool:
    """Images encoded ahead of the forward, once each: when the model takes encoder outputs (recent
    transformers) and its weights are not gathered only inside its forward (FSDP: sharding.py)."""
    if getattr(model, "encodes_images_in_forward", False):
        return False
    return "mm_encoder_outputs" in inspect.signature(model.model.forward).parameters


def packed_inputs(model, batch: list[TrainSample], device: torch.device) -> tuple[dict, list[int]]:
    """The keyword arguments of `model.model` for the batch as one packed row, and each sample's
    offset in that row. Where the batch's images were encoded ahead (image_features.supplying), the
    row carries no pixels: the forward reads the features from there."""
    lengths = [s.n_tokens for s in batch]
    offsets = [0, *itertools.accumulate(lengths)]
    ids = torch.tensor(list(itertools.chain.from_iterable(s.input_ids for s in batch)))[None]
    text_positions = torch.cat([torch.arange(n) for n in lengths])[None]
    # No KV cache: with one, transformers would not look for sample boundaries in the position ids.
    kwargs: dict = {"input_ids": to_device(ids, device), "use_cache": False}
    if _is_vlm(model):
        mrope = torch.cat([_mrope_positions(model, s) for s in batch], dim=-1)
        kwargs["position_ids"] = to_device(torch.cat([text_positions[None], mrope]), device)
        if any(s.vision is not None for s in batch):
            if (images := image_features.supplying()) is not None:
                kwargs["pixel_values"] = images.placeholder()
                kwargs["image_grid_thw"] = to_device(
                    torch.cat([s.vision.image_grid_thw for s in batch if s.vision is not None]), device
                )
            elif _encodes_once(model):
                kwargs["mm_encoder_outputs"] = {"image": _image_features(model, batch, device)}
            else:  # every sample's images through the encoder, inside the forward
                visions = [s.vision for s in batch if s.vision is not None]
                kwargs["pixel_values"] = to_device(torch.cat([v.pixel_values for v in visions]), device, model.dtype)
                kwargs["image_grid_thw"] = to_device(torch.cat([v.image_grid_thw for v in visions]), device)
    else:
        kwargs["position_ids"] = to_device(text_positions, device)
    if varlen_attention.in_use(model):
        kwargs.update(varlen_attention.sequence_bounds(lengths, device))
    return kwargs, offsets[:-1]
