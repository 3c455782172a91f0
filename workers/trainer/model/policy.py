"""The policy model: loading, vision inputs through the model's processor, and response logprobs.

The trainer scores `prompt_ids + response_ids` exactly as the engine produced them (token in, token
out); images become pixel values + grid sizes through the model's own image processor, and the
number of image placeholder tokens in the sequence must be what those images need."""

from __future__ import annotations

import io
import itertools
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

from . import packing, varlen_attention
from .device import to_device
from .gpu_setup import decoder_layers, for_training  # noqa: F401 (the policy's set-up: imported from here too)
from .lm_head import linear_logprobs, linear_nll
from .routing_replay import replay_routing

if TYPE_CHECKING:
    from tempo_common.blobs import BlobStoreBase as BlobStore
    from ..contract import Sample


class SampleInvalid(ValueError):
    """A sample the trainer must not train on (wrong placeholder count, misaligned arrays…)."""


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_policy(
    path: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
) -> torch.nn.Module:
    config = AutoConfig.from_pretrained(path)
    cls = AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM
    model = cls.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation).to(device).train()
    return for_training(model)


@dataclass
class VisionInputs:
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor


@dataclass
class TrainSample:
    """One sample ready for the forward pass (tensors on CPU)."""

    input_ids: list[int]
    prompt_len: int
    loss_mask: torch.Tensor  # (R,) float 0/1
    rollout_logprobs: torch.Tensor  # (R,) fp32
    advantage: float
    vision: VisionInputs | None = None
    name: str = ""
    meta: dict = field(default_factory=dict)
    # One key per image (its blob ref), in order: a packed micro-batch encodes each distinct image once.
    image_keys: tuple = ()
    # Set when a step makes several updates: the logprobs under the weights before its first update
    # (the PPO ratio's denominator) and under the reference (KL), computed once.
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    # rollout.routing_replay on an MoE model: the engine's experts, one row per token of input_ids
    # (n_tokens, layers, top_k) int16, routing_replay.NO_ROUTE where the engine has none.
    routes: torch.Tensor | None = None

    @property
    def response_len(self) -> int:
        return len(self.input_ids) - self.prompt_len

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


class VisionProcessor:
    """Images → (pixel values, grid sizes) through the model's processor, plus the placeholder check."""

    def __init__(self, model_path: str | Path, config):
        self.model_path = Path(model_path)
        self.config = config
        self._image_processor = None

    @property
    def image_token_id(self) -> int | None:
        return getattr(self.config, "image_token_id", None)

    @property
    def merge_size(self) -> int:
        return int(self.config.vision_config.spatial_merge_size)

    def image_processor(self):
        if self._image_processor is None:
            from transformers import AutoImageProcessor

            self._image_processor = AutoImageProcessor.from_pretrained(self.model_path)
        return self._image_processor

    def process(self, images: list) -> VisionInputs:
        out = self.image_processor()(images=images, return_tensors="pt")
        return VisionInputs(out["pixel_values"], out["image_grid_thw"])

    def placeholders_needed(self, grid_thw: torch.Tensor) -> int:
        return int((grid_thw.prod(dim=-1) // (self.merge_size**2)).sum())


def prepare_sample(
    sample: Sample,
    advantage: float,
    blobs: BlobStore,
    vision: VisionProcessor | None,
    routing: tuple[int, int, int] | None = None,
    processed: dict[tuple[str, ...], VisionInputs] | None = None,
) -> TrainSample:
    """routing: (num_hidden_layers, top_k, num_experts) of the MoE model when rollout.routing_replay is
    on: the sample's per-turn routed experts become one row per token (routing_replay.sequence_routes),
    and a sample without any is refused. processed: the images already processed in this step, by their
    refs (a group's samples share their prompt's diagram: read and processed once, the same tensors)."""
    from PIL import Image

    ids = list(sample.prompt_ids) + list(sample.response_ids)
    image_token = vision.image_token_id if vision is not None else None
    n_placeholders = ids.count(image_token) if image_token is not None else 0
    vision_inputs = None
    if sample.images:
        if vision is None:
            raise SampleInvalid(f"sample {sample.episode_id} has images but the model has no vision tower")
        key = tuple(sample.images)
        vision_inputs = processed.get(key) if processed is not None else None
        if vision_inputs is None:
            images = [Image.open(io.BytesIO(blobs.get_bytes(ref))).convert("RGB") for ref in sample.images]
            vision_inputs = vision.process(images)
            if processed is not None:
                processed[key] = vision_inputs
        needed = vision.placeholders_needed(vision_inputs.image_grid_thw)
    else:
        needed = 0
    if n_placeholders != needed:
        raise SampleInvalid(
            f"sample {sample.episode_id}: {n_placeholders} image placeholder tokens in the sequence, but its "
            f"{len(sample.images)} image(s) need {needed} through the model's processor"
        )
    routes = None
    if routing is not None:
        from .routing_replay import RoutingMismatch, sequence_routes

        per_turn = sample.routed_experts
        if not isinstance(per_turn, list) or all(r is None for r in per_turn):
            raise SampleInvalid(
                f"sample {sample.episode_id} carries no routed experts but rollout.routing_replay is on: the engines must run"
                " with --enable-return-routed-experts (tempo-rl adds it to the engines it starts; engines.urls must have it)"
            )
        num_layers, top_k, num_experts = routing
        try:
            routes = torch.from_numpy(
                sequence_routes(
                    per_turn,
                    len(sample.prompt_ids),
                    sample.loss_mask,
                    [t.generated_tokens for t in sample.turns] or None,
                    num_layers=num_layers,
                    top_k=top_k,
                    num_experts=num_experts,
                )
            )
        except RoutingMismatch as err:
            raise SampleInvalid(f"sample {sample.episode_id}: {err}") from err
    return TrainSample(
        input_ids=ids,
        prompt_len=len(sample.prompt_ids),
        loss_mask=torch.tensor(sample.loss_mask, dtype=torch.float32),
        rollout_logprobs=torch.tensor(sample.rollout_logprobs, dtype=torch.float32),
        advantage=float(advantage),
        vision=vision_inputs,
        name=sample.episode_id,
        image_keys=tuple(sample.images),
        routes=routes,
    )


def packs(model) -> bool:
    """Whether the trainer packs this model's micro-batches: where attention keeps the samples of a row
    apart without a [T, T] mask (varlen attention on a GPU). On a CPU it pads: SDPA under a dense
    block-diagonal mask scores every token of the row against every other (T² for the whole row)."""
    return varlen_attention.in_use(model)


def micro_batches(model, samples: list[TrainSample], token_budget: int) -> list[list[TrainSample]]:
    """The micro-batches the trainer runs `samples` in on `model`: packed bins or padded groups."""
    return (packing.pack_micro_batches if packs(model) else padded_micro_batches)(samples, token_budget)


def padded_micro_batches(samples: list[TrainSample], token_budget: int) -> list[list[TrainSample]]:
    """Consecutive groups whose padded size (count × longest) stays within the budget; a sample longer
    than the budget goes alone."""
    batches: list[list[TrainSample]] = []
    current: list[TrainSample] = []
    longest = 0
    for s in samples:
        new_longest = max(longest, s.n_tokens)
        if current and new_longest * (len(current) + 1) > token_budget:
            batches.append(current)
            current, new_longest = [], s.n_tokens
        current.append(s)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


def _replays(batch: list[TrainSample]) -> bool:
    return any(s.routes is not None for s in batch)


def _forward_routes(batch: list[TrainSample], where: list[tuple[int, int]], shape: torch.Size) -> torch.Tensor:
    """The samples' routing rows laid out as the MoE blocks see the forward's tokens: (rows × width)
    flattened, NO_ROUTE at padding and for samples without routes."""
    from .routing_replay import NO_ROUTE

    like = next(s.routes for s in batch if s.routes is not None)
    routes = torch.full((shape[0], shape[1], *like.shape[1:]), NO_ROUTE, dtype=like.dtype)
    for s, (row, off) in zip(batch, where, strict=False):
        if s.routes is not None:
            routes[row, off : off + s.n_tokens] = s.routes
    return routes.flatten(0, 1)


@dataclass
class ForwardOutput:
    logprobs: list[torch.Tensor]  # per sample, (R,) fp32, differentiable (not when `nll` is set)
    entropy: list[torch.Tensor] | None  # per sample, (R,) fp32
    nll: torch.Tensor | None = None  # −Σ nll_weights·logp, differentiable, where the LM head formed it (linear_nll)


LOGIT_CHUNK_ROWS = 1024


def _chunked_logprobs(
    lm_head,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
):
    """logp(target) (and the entropy) of each row, LOGIT_CHUNK_ROWS rows at a time, so the transient
    150k-wide blocks (logits, masks, exp) exist for one chunk, not for the whole micro-batch."""
    logps, entropies = [], []
    for start in range(0, hidden.shape[0], LOGIT_CHUNK_ROWS):
        logits = lm_head(hidden[start : start + LOGIT_CHUNK_ROWS]).float() / temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        logps.append(logp_all.gather(-1, targets[start : start + LOGIT_CHUNK_ROWS, None]).squeeze(-1))
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropies.append(-(logp_all.exp() * logp_all).sum(-1))

    def joined(parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)

    return joined(logps), joined(entropies) if with_entropy else None


def _padded_inputs(model, batch: list[TrainSample], device: torch.device, pad_id: int) -> dict:
    """The keyword arguments of `model.model` for the batch right-padded to its longest sample."""
    width = max(s.n_tokens for s in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for i, s in enumerate(batch):
        input_ids[i, : s.n_tokens] = torch.tensor(s.input_ids)
        attention[i, : s.n_tokens] = 1
    kwargs = {
        "input_ids": to_device(input_ids, device),
        "attention_mask": to_device(attention, device),
        "use_cache": False,
    }
    visions = [s.vision for s in batch if s.vision is not None]
    if visions:
        kwargs["pixel_values"] = to_device(torch.cat([v.pixel_values for v in visions]), device, model.dtype)
        kwargs["image_grid_thw"] = to_device(torch.cat([v.image_grid_thw for v in visions]), device)
        # M-RoPE needs to know which positions are image tokens (what the processor would return).
        kwargs["mm_token_type_ids"] = to_device((input_ids == model.config.image_token_id).to(torch.int32), device)
    return kwargs


def forward_response(
    model: torch.nn.Module,
    batch: list[TrainSample],
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool = False,
    pad_id: int = 0,
    packed: bool | None = None,
    nll_weights: torch.Tensor | None = None,
) -> ForwardOutput:
    """Logprobs of each sample's response tokens under softmax(logits / temperature) (the same
    processing as the engine's logprobs).

    The batch runs as one packed row (packing.py) or right-padded (`packed`; by default as the trainer
    runs this model: `packs`); the LM head
    runs only on the positions that predict loss-mask tokens (the vocabulary is 150k wide: it is
    most of the step's compute and memory).

    nll_weights (one per response position of the batch, concatenated; 0 where the mask is 0): the
    loss −Σ weight·logp is returned as `nll`, its gradients formed in the LM head's forward pass
    (lm_head.linear_nll), and `logprobs` carry no gradient (SFT: a loss linear in the logprobs) —
    except where the LM head has a bias or the entropy is asked for: then `nll` is None."""
    device = next(model.parameters()).device
    if packed if packed is not None else packs(model):
        kwargs, offsets = packing.packed_inputs(model, batch, device)
        where = [(0, off) for off in offsets]  # (row, offset) of each sample in the hidden states
    else:
        kwargs = _padded_inputs(model, batch, device, pad_id)
        where = [(i, 0) for i in range(len(batch))]
    # Only the positions that predict a loss-mask token reach the LM head: observation and template
    # tokens inside a multi-turn response (mask 0) get logprob 0 and entropy 0 and cost nothing.
    # Their indices go to the device before the forward is queued (no wait for it: device.py).
    rows, cols, targets, flat = [], [], [], []
    sizes = [s.response_len for s in batch]
    starts = [0, *itertools.accumulate(sizes)]
    for i, s in enumerate(batch):
        keep = torch.nonzero(s.loss_mask > 0).squeeze(-1)
        rows.append(torch.full_like(keep, where[i][0]))
        cols.append(keep + (where[i][1] + s.prompt_len - 1))
        targets.append(torch.tensor(s.input_ids[s.prompt_len :], dtype=torch.long)[keep])
        flat.append(keep + starts[i])
    rows_t, cols_t, flat_t = (to_device(torch.cat(t), device) for t in (rows, cols, flat))
    kept_targets = to_device(torch.cat(targets), device)
    with (
        replay_routing(model, _forward_routes(batch, where, kwargs["input_ids"].shape))
        if _replays(batch)
        else nullcontext()
    ):
        hidden = model.model(**kwargs).last_hidden_state  # (B, L, H)
    kept = hidden[rows_t, cols_t]
    nll = None
    if (with_entropy and entropy_grad and torch.is_grad_enabled()) or getattr(model.lm_head, "bias", None) is not None:
        picked, picked_entropy = _chunked_logprobs(
            model.lm_head, kept, kept_targets, temperature, with_entropy, entropy_grad
        )
    elif nll_weights is not None and not with_entropy:
        nll, picked = linear_nll(
            kept,
            model.lm_head.weight,
            kept_targets,
            to_device(nll_weights, device)[flat_t],
            temperature,
        )
        picked_entropy = None
    else:
        # The common case (no entropy bonus): logits recomputed in backward, never kept (lm_head.py).
        picked, picked_entropy = linear_logprobs(
            kept,
            model.lm_head.weight,
            kept_targets,
            temperature,
            with_entropy,
        )

    def per_sample(values: torch.Tensor) -> list[torch.Tensor]:
        # the kept positions' values in place, 0 at every mask-0 position, split back per sample
        return list(
            torch.zeros(starts[-1], dtype=torch.float32, device=device).index_put((flat_t,), values).split(sizes)
        )

    return ForwardOutput(per_sample(picked), per_sample(picked_entropy) if picked_entropy is not None else None, nll)
