"""A vision-language policy's images encoded once per update, not once per micro-batch.

A GRPO group's samples share their prompt's diagram, and an update's micro-batches are packed by
length, so the vision tower used to run in every micro-batch that shows an image: at 512 Geo3K
samples, about 110 small tower calls a step, each forward, recompute and backward bound by the host's
kernel launches rather than by FLOPs (a third of the train phase on an H100, whatever the patch
count: docs/benchmarks.md). Here the micro-batches are taken in segments (consecutive micro-batches
whose distinct images' features fit SEGMENT_TOKENS_PER_BUDGET × grpo.micro_batch_tokens merged
tokens, so memory stays bounded by the budget, not by the step's sample count):

1. the segment's distinct images go through the tower without gradients, in chunks of at most
   grpo.micro_batch_tokens patches; each image's features (the merger's output and the deepstack
   layers') become fp32 leaf tensors;
2. each micro-batch's forward reads them where the model would encode its images (the model's own
   get_image_features, replaced around the call in step/gradients.py), and every sample showing an
   image adds its gradient to that image's leaves;
3. after the segment's last micro-batch the tower runs again on the same chunks, with gradients, and
   back-propagates the summed leaf gradients once.

The parameters' gradients are the chain rule's sum in another order; the features are the same
kernels on the same chunks in steps 1 and 3. On by default on one GPU (TEMPO_RL_VISION_ONCE: auto; 1
also on a CPU and under FSDP, 0 never). Under FSDP, whose weights are gathered only inside a forward,
the ranks' collectives are kept in line (OncePerSegment); that path is checked at world size 2 on the
CPU (tests/python/test_data_parallel.py), not yet measured on GPUs, so `auto` leaves it off there."""

from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from collections.abc import Callable

import torch

from .device import to_device
from .sharding import idle_pass

if TYPE_CHECKING:
    from .policy import TrainSample

# A segment's image features at most: 2 × 8,192 merged tokens, at the 2B shape (hidden 2,048, the
# merger's output and 3 deepstack layers, fp32 with their gradients) 1 GiB.
SEGMENT_TOKENS_PER_BUDGET = 2
# The EncodedImages whose features the forward running now reads (EncodedImages.supplied).
_SUPPLYING: contextvars.ContextVar[EncodedImages | None] = contextvars.ContextVar("supplying", default=None)


def supplying() -> EncodedImages | None:
    """The images encoded ahead of the forward being prepared now, if any: its inputs then carry no
    pixels (packing.packed_inputs)."""
    return _SUPPLYING.get()


def _gathers_in_forward(model) -> bool:
    """A sharded policy's (sharding.py): its weights are gathered only inside a forward of its root."""
    return getattr(model, "encodes_images_in_forward", False)


def applies(model) -> bool:
    """Whether the trainer encodes this model's images once per segment (TEMPO_RL_VISION_ONCE)."""
    wanted = os.environ.get("TEMPO_RL_VISION_ONCE", "auto")
    if wanted not in ("auto", "0", "1"):
        raise ValueError(f"TEMPO_RL_VISION_ONCE={wanted!r}: auto, 1 or 0")
    inner = getattr(model, "model", None)
    if wanted == "0" or not hasattr(inner, "visual"):
        return False
    # auto: on one GPU, where it was measured; a sharded policy's ranks (OncePerSegment) are checked on
    # the CPU over gloo only, so there it waits for 1
    return wanted == "1" or (next(model.parameters()).is_cuda and not _gathers_in_forward(model))


def image_keys(s: TrainSample) -> list:
    """One key per image of the sample (its blob ref; the sample's own when it has none)."""
    rows = len(s.vision.image_grid_thw) if s.vision is not None else 0
    return list(s.image_keys) if len(s.image_keys) == rows else [(id(s), j) for j in range(rows)]


@dataclass
class _Image:
    pixels: torch.Tensor  # (patches, channels·patch²), on the CPU
    grid: torch.Tensor  # (3,)
    leaves: list[torch.Tensor] | None = None  # the merger's output, then each deepstack layer's: fp32

    @property
    def patches(self) -> int:
        return int(self.grid.prod())


def distinct_images(batch: list[TrainSample]) -> dict:
    """The batch's distinct images by key, in the order they first appear."""
    images: dict = {}
    for s in batch:
        if s.vision is None:
            continue
        rows = s.vision.image_grid_thw.prod(-1).tolist()
        for key, px, grid in zip(
            image_keys(s), s.vision.pixel_values.split(rows), s.vision.image_grid_thw, strict=True
        ):
            images.setdefault(key, _Image(px, grid))
    return images


def segments(batches: list[list[TrainSample]], merge: int, token_budget: int) -> list[range]:
    """Consecutive micro-batches whose distinct images hold at most SEGMENT_TOKENS_PER_BUDGET ×
    token_budget merged tokens together (a micro-batch above that alone)."""
    cap = SEGMENT_TOKENS_PER_BUDGET * token_budget
    out: list[range] = []
    start, seen, tokens = 0, set(), 0
    for i, batch in enumerate(batches):
        shown = {k: im.patches // merge**2 for k, im in distinct_images(batch).items()}
        new = {k: n for k, n in shown.items() if k not in seen}
        if i > start and new and tokens + sum(new.values()) > cap:
            out.append(range(start, i))
            start, seen, tokens, new = i, set(), 0, shown
        seen |= new.keys()
        tokens += sum(new.values())
    if batches:
        out.append(range(start, len(batches)))
    return out


class EncodedImages:
    """A segment's distinct images, encoded once (step 1 of the module's docstring)."""

    def __init__(self, model, batches: list[list[TrainSample]], token_budget: int, precision: Callable):
        # A sharded policy (sharding.py): encoded ahead through a forward of its root, which gathers the
        # tower's weights; the backward's encoding finds them gathered by a micro-batch's forward.
        self._inner = model.backbone_module if _gathers_in_forward(model) else model.model
        self._encode_ahead = model.encode_images if _gathers_in_forward(model) else self._inner.get_image_features
        self._precision = precision
        self._device, self._dtype = next(model.parameters()).device, model.dtype
        self.images: dict = {}
        for batch in batches:
            for key, image in distinct_images(batch).items():
                self.images.setdefault(key, image)
        self._chunks = self._chunk(token_budget)
        self._output_type = None
        self._split_deepstack = False
        with torch.no_grad():
            for chunk in self._chunks:
                for image, features in zip(chunk, self._encode(chunk, self._encode_ahead), strict=True):
                    image.leaves = [f.detach().float().requires_grad_() for f in features]

    def _chunk(self, token_budget: int) -> list[list[_Image]]:
        chunks: list[list[_Image]] = [[]]
        for image in self.images.values():
            if chunks[-1] and sum(im.patches for im in chunks[-1]) + image.patches > token_budget:
                chunks.append([])
            chunks[-1].append(image)
        return [c for c in chunks if c]

    def _encode(self, chunk: list[_Image], get_image_features: Callable) -> list[list[torch.Tensor]]:
        """Each image's features, through the model's own get_image_features."""
        pixels = to_device(torch.cat([im.pixels for im in chunk]), self._device, self._dtype)
        grids = to_device(torch.stack([im.grid for im in chunk]), self._device)
        with self._precision():
            out = get_image_features(pixels, grids, return_dict=True)
        self._output_type = type(out)
        deepstack = out.deepstack_features or []
        # transformers up to 5.17 concatenates each deepstack layer's images; later releases split them
        self._split_deepstack = bool(deepstack) and isinstance(deepstack[0], torch.Tensor)
        sizes = [len(p) for p in out.pooler_output]
        layers = [layer.split(sizes) if isinstance(layer, torch.Tensor) else layer for layer in deepstack]
        return [[out.pooler_output[j], *(layer[j] for layer in layers)] for j in range(len(chunk))]

    def _output_for(self, batch: list[TrainSample]):
        """The features of the batch's images in the order of its placeholders, as the model's own
        get_image_features returns them."""
        shown = [self.images[key].leaves for s in batch if s.vision is not None for key in image_keys(s)]
        deepstack = [tuple(leaves[1 + n] for leaves in shown) for n in range(len(shown[0]) - 1)]
        return self._output_type(
            pooler_output=tuple(leaves[0] for leaves in shown),
            deepstack_features=[torch.cat(layer) for layer in deepstack] if self._split_deepstack else deepstack,
        )

    @contextlib.contextmanager
    def supplied(self, batch: list[TrainSample]):
        """The model's forward over `batch` reads its images' features from here (step 2): its
        get_image_features answers with them, whatever pixels it is given."""
        if not any(s.vision is not None for s in batch):
            yield
            return
        output = self._output_for(batch)
        self._inner.get_image_features = lambda *args, **kwargs: output
        token = _SUPPLYING.set(self)
        try:
            yield
        finally:
            _SUPPLYING.reset(token)
            del self._inner.get_image_features

    def placeholder(self) -> torch.Tensor:
        """What a packed row's forward gets as pixel_values: never read (the features come from
        supplied). A padded batch (the CPU's) still carries its pixels, unread."""
        return torch.empty(0, device=self._device, dtype=self._dtype)

    def backward(self) -> None:
        """The tower once more, with gradients, back-propagating each image's summed gradients (step 3)."""
        for chunk in self._chunks:
            outputs, grads = [], []
            for image, features in zip(chunk, self._encode(chunk, self._inner.get_image_features), strict=True):
                for leaf, feature in zip(image.leaves, features, strict=True):
                    if leaf.grad is not None:
                        outputs.append(feature)
                        grads.append(leaf.grad.to(feature.dtype))
            if outputs:
                torch.autograd.backward(outputs, grads)
        self.images.clear()


class OncePerSegment:
    """accumulate_gradients' view: the EncodedImages of the segment micro-batch i belongs to, encoded
    at its first micro-batch, back-propagated after its last (none where `applies` says no).

    A sharded policy's ranks must run the same collectives in the same order, whatever images each
    rank's share shows. Its encoding ahead gathers the root's weights just before a micro-batch's
    forward would (the same collective, made once); the tower's backward of a segment is deferred to
    the next micro-batch's backward (`backward`: its forward has gathered the weights, its backward
    reduces the tower's gradients with the rest), and the last segment's to one pass more at the end
    (`finish`), made by every rank: no collective is added or moved."""

    def __init__(self, model, batches: list[list[TrainSample]], token_budget: int, precision: Callable):
        self._model, self._batches, self._budget, self._precision = model, batches, token_budget, precision
        self._applies = applies(model)
        on = self._applies and any(s.vision is not None for b in batches for s in b)
        merge = int(model.config.vision_config.spatial_merge_size) if on else 1
        self._segments = segments(batches, merge, token_budget) if on else []
        self._current: EncodedImages | None = None
        self._deferred = _gathers_in_forward(model)
        self._pending: EncodedImages | None = None  # a segment whose tower backward is deferred

    def before(self, i: int) -> EncodedImages | None:
        for seg in self._segments:
            if seg.start == i:
                self._current = EncodedImages(
                    self._model, self._batches[seg.start : seg.stop], self._budget, self._precision
                )
        return self._current

    def backward(self, loss: torch.Tensor) -> None:
        """A micro-batch's loss.backward(), after the tower backward deferred to it."""
        self._flush()
        loss.backward()

    def after(self, i: int) -> None:
        if self._current is not None and any(seg.stop - 1 == i for seg in self._segments):
            if torch.is_grad_enabled():
                if self._deferred:
                    self._pending = self._current
                else:
                    self._current.backward()
            self._current = None

    def finish(self) -> None:
        """After the last micro-batch: a sharded policy's last deferred tower backward, in one pass more
        (a forward of one token, loss 0) that every rank makes, with images or without."""
        if self._deferred and self._applies and torch.is_grad_enabled():
            idle_pass(self._model, next(self._model.parameters()).device, backward=True, before_backward=self._flush)

    def _flush(self) -> None:
        if self._pending is not None:
            self._pending.backward()
            self._pending = None
