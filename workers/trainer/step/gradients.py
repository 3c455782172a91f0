"""A step's optimizer updates: gradients accumulated by micro-batches (GRPO's policy loss, or SFT's masked
NLL), the optimizer and its hyperparameters, and the mini-batches of grpo.ppo_mini_batches. Used by
train_step.py's Trainer and worker/data_parallel.py's ranks alike."""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from typing import Protocol

import torch

from ..contract import Hyper
from .grpo import aggregation_weights, only_active, policy_loss, sft_loss
from ..model.device import to_device
from ..model.image_features import EncodedImages, OncePerSegment
from ..model.policy import ForwardOutput, TrainSample, forward_response, micro_batches
from .token_logprobs import TokenLogprobs


class Progress(Protocol):
    def heartbeat(self, details: dict) -> None: ...
    def is_cancelled(self) -> bool: ...


class NoProgress:
    def heartbeat(self, details: dict) -> None:
        pass

    def is_cancelled(self) -> bool:
        return False


class StepCancelled(Exception):
    pass


def make_optimizer(model: torch.nn.Module, hyper: Hyper) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    # One fused kernel for the whole update on a GPU (the foreach loop on CPU).
    fused = bool(params) and all(p.is_cuda for p in params)
    return torch.optim.AdamW(
        params, lr=hyper.lr, weight_decay=hyper.weight_decay, betas=(0.9, 0.98), eps=hyper.adam_eps, fused=fused or None
    )


def compute_precision(model: torch.nn.Module, dtype: str):
    """bfloat16: forward in bf16 under autocast over the fp32 weights (their gradients, and so the
    AdamW update, stay fp32: bf16 weights would round most updates at RL learning rates away)."""
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=dtype == "bfloat16")


def _forward(
    model, batch: list[TrainSample], hyper: Hyper, temperature: float, images: EncodedImages | None = None, **kw
) -> ForwardOutput:
    """forward_response in the step's precision; images: the batch's images encoded already, once
    for several micro-batches (model/image_features.py)."""
    with compute_precision(model, hyper.compute_dtype), images.supplied(batch) if images is not None else nullcontext():
        return forward_response(model, batch, temperature, **kw)


def set_hyper(optimizer: torch.optim.Optimizer, hyper: Hyper) -> None:
    for group in optimizer.param_groups:
        group["lr"] = hyper.lr
        group["weight_decay"] = hyper.weight_decay
        group["eps"] = hyper.adam_eps


def accumulate_gradients(
    model,
    samples: list[TrainSample],
    hyper: Hyper,
    progress: Progress,
    ref_model=None,
    algorithm: str = "grpo",
    totals: tuple[int, int] | None = None,
    record: TokenLogprobs | None = None,
) -> dict[str, torch.Tensor | float]:
    """Forward + backward over micro-batches (policy.micro_batches); gradients sum to those of the whole batch.

    The metrics stay on the device (summed tensors) so that the GPU never waits for the host between
    micro-batches: the caller reads them all at once (Trainer._updates: one sync per update).
    algorithm "sft": masked NLL of the loss-mask tokens (token mean over the batch), at temperature 1.
    totals: (samples, loss-mask tokens) of the whole batch when `samples` is one rank's share of it.
    record: collects each sample's per-token logprobs (token_logprobs.py), the ones compared with the engine's."""
    n_samples_total, n_tokens_total = totals or (len(samples), int(sum(float(s.loss_mask.sum()) for s in samples)))
    batches = micro_batches(model, samples, hyper.micro_batch_tokens)
    images = _images_once(model, batches, hyper)
    sums: dict[str, torch.Tensor | float] = {}
    abs_diff_sum = 0.0
    for i, batch in enumerate(batches):
        if progress.is_cancelled():
            raise StepCancelled(f"cancelled before micro-batch {i}/{len(batches)}")
        if algorithm == "sft":
            images.backward(_sft_micro_batch(model, batch, n_tokens_total, sums, hyper, images.before(i)))
            images.after(i)
            progress.heartbeat({"phase": "training", "micro_batch": i + 1, "micro_batches": len(batches)})
            continue
        fwd = _forward(
            model,
            batch,
            hyper,
            hyper.temperature,
            with_entropy=True,
            entropy_grad=hyper.entropy_coef > 0,
            images=images.before(i),
        )
        device = fwd.logprobs[0].device
        ref = None
        if hyper.kl.enabled:
            if batch[0].ref_logprobs is not None:
                ref = [to_device(s.ref_logprobs, device) for s in batch]
            else:
                with torch.no_grad():
                    ref = _forward(ref_model, batch, hyper, hyper.temperature, with_entropy=False).logprobs
        mask = to_device(torch.cat([s.loss_mask for s in batch]), device)
        masks = list(mask.split([s.response_len for s in batch]))
        weights = aggregation_weights(masks, hyper.loss_agg, n_samples_total, n_tokens_total)
        logp = torch.cat(fwd.logprobs)
        rollout = to_device(torch.cat([s.rollout_logprobs for s in batch]), device)
        adv = to_device(torch.cat([torch.full((s.response_len,), s.advantage) for s in batch]), device)
        # One update per step: the weights that sampled are the ones being trained (ratio 1).
        old = (
            to_device(torch.cat([s.old_logprobs for s in batch]), device)
            if batch[0].old_logprobs is not None
            else logp.detach()
        )
        loss, metrics = policy_loss(
            logp=logp,
            old_logp=old,
            rollout_logp=rollout,
            advantages=adv,
            weights=torch.cat(weights),
            hyper=hyper,
            entropy=torch.cat(fwd.entropy),
            ref_logp=torch.cat(ref) if ref is not None else None,
        )
        images.backward(loss)
        images.after(i)
        abs_diff_sum = abs_diff_sum + only_active((old - rollout).abs(), mask > 0).sum()
        if record is not None:
            record.add(batch, old)
        for k, v in metrics.items():
            sums[k] = sums.get(k, 0.0) + v.detach()
        progress.heartbeat({"phase": "training", "micro_batch": i + 1, "micro_batches": len(batches)})
    images.finish()
    if algorithm != "sft":
        sums["train/train_rollout_logprob_abs_diff"] = abs_diff_sum / max(n_tokens_total, 1)
    sums["train/n_micro_batches"] = float(len(batches))
    return sums


def _images_once(model, batches: list[list[TrainSample]], hyper: Hyper) -> OncePerSegment:
    """The micro-batches' images encoded once per segment (model/image_features.py), in the step's precision."""
    return OncePerSegment(
        model, batches, hyper.micro_batch_tokens, lambda: compute_precision(model, hyper.compute_dtype)
    )


def update_batches(samples: list[TrainSample], hyper: Hyper) -> list[list[TrainSample]]:
    """The samples of each optimizer update of a step: grpo.ppo_mini_batches consecutive slices (a
    step's samples come prompt by prompt, so groups stay together when the sizes divide), repeated
    grpo.ppo_epochs times."""
    k = min(hyper.ppo_mini_batches, len(samples))
    size = -(-len(samples) // k)
    return [samples[i : i + size] for i in range(0, len(samples), size)] * hyper.ppo_epochs


def with_old_logprobs(model, samples: list[TrainSample], hyper: Hyper, ref_model=None) -> list[TrainSample]:
    """The samples with their logprobs under the current weights (and the reference's, for the KL),
    before a step's first update: every later update of the step takes its PPO ratio against them."""
    scored: dict[int, TrainSample] = {}
    with torch.no_grad():
        batches = micro_batches(model, samples, hyper.micro_batch_tokens)
        images = _images_once(model, batches, hyper)  # once per segment here too (no backward: no gradients)
        for i, batch in enumerate(batches):
            old = _forward(model, batch, hyper, hyper.temperature, with_entropy=False, images=images.before(i)).logprobs
            images.after(i)
            ref = (
                _forward(ref_model, batch, hyper, hyper.temperature, with_entropy=False).logprobs
                if ref_model is not None
                else [None] * len(batch)
            )
            for s, o, r in zip(batch, old, ref, strict=False):
                scored[id(s)] = dataclasses.replace(
                    s, old_logprobs=o.float().cpu(), ref_logprobs=None if r is None else r.float().cpu()
                )
    # in the samples' order (packed bins reorder them): update_batches slices it group by group
    return [scored[id(s)] for s in samples]


def _sft_micro_batch(
    model, batch: list[TrainSample], n_tokens_total: int, sums: dict, hyper: Hyper, images=None
) -> torch.Tensor:
    """The micro-batch's SFT loss (its metrics added to sums), for the caller's backward."""
    device = next(model.parameters()).device
    weights = torch.cat(
        aggregation_weights([to_device(s.loss_mask, device) for s in batch], "token_mean", len(batch), n_tokens_total)
    )
    fwd = _forward(model, batch, hyper, 1.0, with_entropy=False, nll_weights=weights, images=images)
    loss, metrics = sft_loss(torch.cat(fwd.logprobs), weights, fwd.nll)
    for k, v in metrics.items():
        sums[k] = sums.get(k, 0.0) + v.detach()
    return loss
