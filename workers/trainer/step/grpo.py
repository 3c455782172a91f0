"""GRPO maths (docs/ARCHITECTURE.md): group advantages, the PPO-clip policy loss, KL, entropy, TIS and
the loss aggregation. Pure tensor functions, no model, no I/O."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

STD_EPS = 1e-6
KL_CLAMP = 10.0
LOG_RATIO_CLAMP = 20.0


class ContractError(ValueError):
    """Inputs the maths cannot accept (mismatched lengths, unknown options): a retry cannot fix them."""


def group_advantages(rewards: Sequence[float], group_ids: Sequence[str], dr_grpo: bool = False) -> torch.Tensor:
    """(r − mean) / (std_unbiased + 1e-6) per group, in fp32; Dr.GRPO: r − mean.

    A group whose rewards are all equal (including a group of one) gets exactly 0: computing
    r − mean in floating point is not guaranteed to be 0 for non-binary rewards, and a tiny
    non-zero advantage would be a false gradient."""
    if len(rewards) != len(group_ids):
        raise ContractError(f"{len(rewards)} rewards for {len(group_ids)} group ids")
    r = torch.tensor(list(rewards), dtype=torch.float32)
    out = torch.zeros_like(r)
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        members[g].append(i)
    for idx in members.values():
        g = r[idx]
        if bool((g == g[0]).all()):
            continue
        centred = g - g.mean()
        out[idx] = centred if dr_grpo else centred / (g.std(unbiased=True) + STD_EPS)
    return out


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference, as verl computes it (log r = logp − ref_logp).

    k1 = log r and k2 = (log r)²/2 are not clamped: clamping the value would zero their gradient exactly
    where the policy has drifted furthest (k2 had none beyond |log r| = 4.47 under a ±10 clamp).
    low_var_kl (k3) = exp(−log r) + log r − 1: log r is clamped to ±20 before the exp (exp overflows
    float32 beyond 88.7, and inf times a zero upstream gradient is NaN), then the value to ±10."""
    log_ratio = logp.float() - ref_logp.float()
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return log_ratio.square() / 2
    if kind == "low_var_kl":
        log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return (torch.exp(-log_ratio) + log_ratio - 1).clamp(-KL_CLAMP, KL_CLAMP)
    raise ContractError(f"unknown KL type {kind!r}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of softmax(logits) (logits already divided by the temperature)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def ppo_clip_terms(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_clip: float, eps_clip_high: float
):
    """Per-token PPO-clip loss (asymmetric clip), clip indicator and approximate KL (old − new)."""
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    loss = torch.maximum(unclipped, clipped)
    clipfrac = (clipped > unclipped).float()
    return loss, clipfrac, -log_ratio


def tis_weights(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, clip: float, mode: str = "truncate"
) -> torch.Tensor:
    """Importance weights of the behaviour policy (the engine's rollout logprobs) against the trainer's
    old policy, no gradient. truncate (TIS): min(w, clip). mask: w inside [1/clip, clip], else 0 — the
    token does not train. With rollout.max_staleness > 0 the behaviour policy is up to k versions
    older than the old policy (decoupled PPO: the clip ratio is taken against the old policy, this
    weight corrects for the sampler)."""
    w = torch.exp(old_logp.detach() - rollout_logp)
    if mode == "truncate":
        return w.clamp(max=clip)
    if mode == "mask":
        return torch.where((w >= 1 / clip) & (w <= clip), w, torch.zeros_like(w))
    raise ContractError(f"unknown tis mode {mode!r}")


def aggregation_weights(
    loss_masks: Sequence[torch.Tensor], loss_agg: str, n_samples_total: int, n_tokens_total: int
) -> list[torch.Tensor]:
    """Per-token weights whose weighted sum is the batch loss.

    sample_mean: mean over samples of each sample's token mean → mask / (n_tokens(sample) · n_samples).
    token_mean: global token mean → mask / n_tokens(batch).
    Denominators are batch-wide, so summing over micro-batches gives the same loss as one batch."""
    out = []
    for m in loss_masks:
        m = m.float()
        if loss_agg == "sample_mean":
            out.append(m / (m.sum().clamp(min=1) * max(n_samples_total, 1)))
        elif loss_agg == "token_mean":
            out.append(m / max(n_tokens_total, 1))
        else:
            raise ContractError(f"unknown loss_agg {loss_agg!r}")
    return out


def policy_loss(
    *,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    hyper,
    entropy: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The GRPO loss of some tokens (1-D tensors aligned over response tokens of one or more samples).

    `weights` come from aggregation_weights (0 where loss_mask is 0); the returned loss and every
    metric are weighted sums, so they add up across micro-batches. `hyper` is a contract.Hyper.

    Tokens of weight 0 are zeroed in every input before any term is computed: zeroing the terms after
    (or weighting them by 0) still back-propagates 0 · inf = NaN from an infinite logprob or exp."""
    active = weights != 0
    logp, old_logp, rollout_logp, advantages = (
        only_active(x, active) for x in (logp, old_logp, rollout_logp, advantages)
    )
    entropy = only_active(entropy, active) if entropy is not None else None
    ref_logp = only_active(ref_logp, active) if ref_logp is not None else None
    pg, clipfrac, ppo_kl = ppo_clip_terms(logp, old_logp, advantages, hyper.eps_clip, hyper.eps_clip_high)
    if hyper.tis.enabled:
        tis = tis_weights(old_logp, rollout_logp, hyper.tis.clip, hyper.tis.mode)
        pg = pg * tis
        metrics_tis = {
            "train/tis_weight": (tis * weights).sum(),
            "train/tis_masked": ((tis == 0).float() * weights).sum(),
        }
    else:
        metrics_tis = {}
    pg_loss = (pg * weights).sum()
    loss = pg_loss
    metrics = {
        "train/pg_loss": pg_loss.detach(),
        "train/pg_clipfrac": (clipfrac * weights).sum(),
        "train/ppo_kl": (ppo_kl.detach() * weights).sum(),
        **metrics_tis,
    }
    if entropy is not None:
        ent = (entropy * weights).sum()
        metrics["train/entropy"] = ent.detach()
        if hyper.entropy_coef:
            loss = loss - hyper.entropy_coef * ent
    if hyper.kl.enabled:
        if ref_logp is None:
            raise ContractError("KL enabled but no reference logprobs")
        kl = (kl_penalty(logp, ref_logp, hyper.kl.type) * weights).sum()
        metrics["train/kl_loss"] = kl.detach()
        loss = loss + hyper.kl.coef * kl
    metrics["train/loss"] = loss.detach()
    return loss, metrics


def only_active(x: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    return x.masked_fill(~active, 0.0)


def sft_loss(
    logp: torch.Tensor, weights: torch.Tensor, fused: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Masked NLL (SFT): `weights` from aggregation_weights (0 on prompt and observation tokens), so the
    loss and the metric add up across micro-batches to the batch's token-mean NLL. `fused`: the same
    sum as the LM head formed it with its gradients (lm_head.linear_nll), used as it is."""
    loss = fused if fused is not None else -(only_active(logp, weights != 0) * weights).sum()
    return loss, {"sft/nll": loss.detach(), "train/loss": loss.detach()}
