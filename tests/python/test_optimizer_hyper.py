"""grpo.adam_eps reaches the trainer's AdamW, at creation and when a later step changes it."""

import torch

from trainer.contract import Hyper
from trainer.step.gradients import make_optimizer, set_hyper


def test_adam_eps_is_the_configured_one_and_follows_the_step_hyper():
    model = torch.nn.Linear(4, 2)
    opt = make_optimizer(model, Hyper(lr=1e-3, adam_eps=1e-5))
    assert opt.param_groups[0]["eps"] == 1e-5
    set_hyper(opt, Hyper(lr=1e-3, adam_eps=3e-6))
    assert opt.param_groups[0]["eps"] == 3e-6
    assert make_optimizer(model, Hyper()).param_groups[0]["eps"] == 1e-8


def test_a_larger_eps_damps_the_update_of_a_parameter_with_a_tiny_gradient():
    def first_step(eps: float) -> float:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = make_optimizer(torch.nn.ParameterList([p]), Hyper(lr=1e-2, adam_eps=eps))
        p.grad = torch.full((1,), 1e-9)
        opt.step()
        return abs(float(p))

    # Adam's first step is lr·sign(g) whatever |g| is, unless eps is large against |g|.
    assert first_step(1e-12) > 0.9e-2
    assert first_step(1e-5) < 1e-5
