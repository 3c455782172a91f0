"""KL as verl computes it, and masked tokens that can never put NaN into the gradient."""

import math

import pytest
import torch

from trainer.contract import Hyper
from trainer.step.grpo import aggregation_weights, kl_penalty, policy_loss, sft_loss


def kl_and_grad(log_ratio: list[float], kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.tensor(log_ratio, requires_grad=True)
    kl = kl_penalty(logp, torch.zeros(len(log_ratio)), kind)
    kl.sum().backward()
    return kl.detach(), logp.grad


@pytest.mark.parametrize("kind", ["k1", "k2", "low_var_kl"])
def test_extreme_log_ratios_give_finite_values_and_gradients(kind):
    kl, grad = kl_and_grad([-100.0, 100.0, -30.0, 30.0], kind)
    assert torch.isfinite(kl).all() and torch.isfinite(grad).all(), (kl, grad)


def test_low_var_kl_is_clamped_like_verl():
    kl, grad = kl_and_grad([-100.0, 100.0], "low_var_kl")
    # log r clamped to ±20, then k3 clamped to ±10: both sides saturate at 10, with no gradient
    assert kl.tolist() == [10.0, 10.0] and grad.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("x", [-2.0, -0.3, 0.0, 0.01, 0.7, 1.5])
def test_ordinary_values_match_the_formulas(x):
    for kind, value, slope in (
        ("k1", x, 1.0),
        ("k2", x * x / 2, x),
        ("low_var_kl", math.exp(-x) + x - 1, 1 - math.exp(-x)),
    ):
        kl, grad = kl_and_grad([x], kind)
        assert kl.item() == pytest.approx(value, abs=1e-6), kind
        assert grad.item() == pytest.approx(slope, abs=1e-5), kind


def test_k1_and_k2_keep_their_gradient_far_from_the_reference():
    _, grad = kl_and_grad([6.0, -6.0], "k2")
    assert grad.tolist() == pytest.approx([6.0, -6.0])
    _, grad = kl_and_grad([15.0], "k1")
    assert grad.item() == 1.0


def test_masked_tokens_with_infinite_logprobs_inject_no_nan():
    """A weight-0 token whose logprob is −inf (a padded slot) must
    leave the loss and the gradient finite, with zero gradient at that token."""
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0])
    w = torch.cat(aggregation_weights([mask], "token_mean", 1, 2))
    inf = float("inf")
    hyper = Hyper(
        entropy_coef=0.01, kl={"enabled": True, "coef": 0.1, "type": "low_var_kl"}, tis={"enabled": True, "clip": 2.0}
    )
    logp = torch.tensor([-1.0, -inf, -0.5, -inf], requires_grad=True)
    loss, metrics = policy_loss(
        logp=logp,
        old_logp=logp.detach(),
        rollout_logp=torch.tensor([-1.1, 0.0, -0.4, -inf]),
        advantages=torch.tensor([1.0, float("nan"), 1.0, 1.0]),
        weights=w,
        hyper=hyper,
        entropy=torch.tensor([1.0, inf, 2.0, float("nan")]),
        ref_logp=torch.tensor([-1.2, -inf, -0.4, float("nan")]),
    )
    loss.backward()
    assert all(math.isfinite(float(v)) for v in metrics.values()), metrics
    assert torch.isfinite(logp.grad).all(), logp.grad
    assert logp.grad[1] == 0 and logp.grad[3] == 0 and logp.grad[0] != 0

    logp = torch.tensor([-1.0, -inf, -0.5, -inf], requires_grad=True)
    loss, _ = sft_loss(logp, w)
    loss.backward()
    assert loss.item() == pytest.approx(0.75) and logp.grad.tolist() == [-0.5, 0.0, -0.5, 0.0]
