import math

import pytest
import torch

from trainer.contract import Hyper
from trainer.step.grpo import aggregation_weights, group_advantages, kl_penalty, policy_loss, tis_weights


def test_advantages_per_group_unbiased_std():
    adv = group_advantages([1, 0, 1, 1, 0, 0], ["a", "a", "b", "b", "b", "b"])
    assert adv.dtype == torch.float32
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # mean .5, unbiased std sqrt(.5)
    std_b = math.sqrt((0.5**2 * 4) / 3)
    assert adv[:2].tolist() == pytest.approx([a, -a], rel=1e-6)
    assert adv[2:].tolist() == pytest.approx([0.5 / (std_b + 1e-6)] * 2 + [-0.5 / (std_b + 1e-6)] * 2, rel=1e-6)


def test_all_equal_group_is_exactly_zero_even_for_fractional_rewards():
    adv = group_advantages([0.1, 0.1, 0.1, 1, 1, 0.7], ["a", "a", "a", "b", "b", "c"])
    assert adv.tolist() == [0.0] * 6  # "c" is a group of one: no std, no advantage


def test_dr_grpo_does_not_divide_by_std():
    adv = group_advantages([1, 0, 0, 0], ["g"] * 4, dr_grpo=True)
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_groups_need_not_be_contiguous():
    adv = group_advantages([1, 5, 0, 5], ["a", "b", "a", "b"])
    assert adv[1] == 0 and adv[3] == 0 and adv[0] == -adv[2] > 0


def test_length_mismatch_fails():
    with pytest.raises(ValueError):
        group_advantages([1, 0], ["a"])


def _token_pg(logp, old, adv, lo=0.2, hi=0.28):
    ratio = math.exp(logp - old)
    return max(-adv * ratio, -adv * min(max(ratio, 1 - lo), 1 + hi))


def test_loss_against_a_hand_computed_batch():
    # Sample A: advantage +a, tokens all in the loss. Sample B: −a, its middle token masked (observation).
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    logp = [-1.0, -2.0, -0.5, -0.3, -0.7]
    old = [-1.1, -1.5, -0.5, -0.6, -0.2]
    adv = [a, a, -a, -a, -a]
    masks = [torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0, 1.0])]
    hyper = Hyper()
    # Token A1: ratio e^0.1 = 1.105 < 1.28, unclipped. A2: ratio e^-0.5 = .61, A>0 → min side binds
    # (−a·max(.61, .8)? no: loss = max(−a·.61, −a·.8) = −a·.61), not clipped. B3: ratio e^-0.5, A<0 →
    # max(a·.61, a·.8) = a·.8, clipped.
    per_token = [_token_pg(l, o, v) for l, o, v in zip(logp, old, adv, strict=False)]
    assert per_token[4] == pytest.approx(a * 0.8)
    sample_mean = ((per_token[0] + per_token[1]) / 2 + (per_token[2] + per_token[4]) / 2) / 2
    token_mean = (per_token[0] + per_token[1] + per_token[2] + per_token[4]) / 4

    for agg, expected in (("sample_mean", sample_mean), ("token_mean", token_mean)):
        w = torch.cat(aggregation_weights(masks, agg, n_samples_total=2, n_tokens_total=4))
        t_logp = torch.tensor(logp, requires_grad=True)
        loss, m = policy_loss(
            logp=t_logp,
            old_logp=torch.tensor(old),
            rollout_logp=torch.tensor(old),
            advantages=torch.tensor(adv),
            weights=w,
            hyper=hyper.model_copy(update={"loss_agg": agg}),
        )
        assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
        assert float(m["train/pg_loss"]) == pytest.approx(expected, rel=1e-5)
        clipfrac = {"sample_mean": (0 + 0) / 2 / 2 + (0 + 1) / 2 / 2, "token_mean": 1 / 4}[agg]
        assert float(m["train/pg_clipfrac"]) == pytest.approx(clipfrac)
        loss.backward()
        assert t_logp.grad[4] == 0  # the clipped token carries no gradient
        assert t_logp.grad[3] == 0  # nor does the masked one


def test_kl_entropy_and_tis_terms():
    logp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])
    d = [0.5, -1.0]
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx(d)
    assert kl_penalty(logp, ref, "k2").tolist() == pytest.approx([x * x / 2 for x in d])
    assert kl_penalty(logp, ref, "low_var_kl").tolist() == pytest.approx([math.exp(-x) + x - 1 for x in d])
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([-50.0]), "k1").item() == 50.0  # verl: k1 unclamped
    assert kl_penalty(torch.tensor([-50.0]), torch.tensor([0.0]), "low_var_kl").item() == 10.0
    assert tis_weights(torch.tensor([-1.0, -1.0]), torch.tensor([-3.0, -0.9]), 2.0).tolist() == pytest.approx(
        [2.0, math.exp(-0.1)]
    )

    hyper = Hyper(
        entropy_coef=0.01, kl={"enabled": True, "coef": 0.1, "type": "k2"}, tis={"enabled": True, "clip": 2.0}
    )
    w = torch.tensor([0.5, 0.5])
    adv = torch.tensor([1.0, 1.0])
    rollout = torch.tensor([-3.0, -2.1])
    ent = torch.tensor([2.0, 4.0])
    loss, m = policy_loss(
        logp=logp,
        old_logp=logp,
        rollout_logp=rollout,
        advantages=adv,
        weights=w,
        hyper=hyper,
        entropy=ent,
        ref_logp=ref,
    )
    pg = -(0.5 * 2.0 + 0.5 * math.exp(0.1))  # ratio 1, times TIS weights
    kl = 0.5 * 0.125 + 0.5 * 0.5
    assert float(m["train/pg_loss"]) == pytest.approx(pg)
    assert float(m["train/entropy"]) == pytest.approx(3.0)
    assert float(m["train/kl_loss"]) == pytest.approx(kl)
    assert float(loss) == pytest.approx(pg - 0.01 * 3.0 + 0.1 * kl)


def test_kl_is_ignored_when_disabled():
    hyper = Hyper(kl={"enabled": False, "coef": 1.0, "type": "k1"})
    x = torch.tensor([-1.0])
    loss, m = policy_loss(
        logp=x,
        old_logp=x,
        rollout_logp=x,
        advantages=torch.tensor([1.0]),
        weights=torch.tensor([1.0]),
        hyper=hyper,
        ref_logp=torch.tensor([-9.0]),
    )
    assert "train/kl_loss" not in m and float(loss) == -1.0


def test_tis_mask_mode_drops_tokens_outside_the_band():
    # w = π_old / π_rollout: e^2 (above clip 2), e^-0.1 (inside), e^-1 (below 1/2)
    old = torch.tensor([-1.0, -1.0, -2.0])
    rollout = torch.tensor([-3.0, -0.9, -1.0])
    assert tis_weights(old, rollout, 2.0, "mask").tolist() == pytest.approx([0.0, math.exp(-0.1), 0.0])
    assert tis_weights(old, rollout, 2.0, "truncate").tolist() == pytest.approx([2.0, math.exp(-0.1), math.exp(-1.0)])
    hyper = Hyper(tis={"enabled": True, "clip": 2.0, "mode": "mask"})
    w = torch.full((3,), 1 / 3)
    _, m = policy_loss(logp=old, old_logp=old, rollout_logp=rollout, advantages=torch.ones(3), weights=w, hyper=hyper)
    assert float(m["train/tis_masked"]) == pytest.approx(2 / 3)
    assert float(m["train/pg_loss"]) == pytest.approx(-math.exp(-0.1) / 3)
