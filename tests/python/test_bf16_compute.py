"""model.dtype bfloat16: the trainer computes in bf16 over fp32 master weights, so a step at an RL
learning rate moves the weights as the fp32 step does. Held in bf16 (the old GPU bench's set-up),
the same update is rounded away for nearly every weight."""

import pytest
import torch

from trainer.contract import Hyper, TrainStepInput
from trainer.step.train_step import Trainer, make_optimizer

LR = 1e-6


def deltas(make_input, refs, tmp_path, dtype: str, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor, dict]:
    trainer = Trainer(device=device)
    inp = TrainStepInput.model_validate(
        make_input(refs, run_dir=tmp_path / f"{dtype}-{device}", lr=LR, compute_dtype=dtype)
    )
    before = torch.cat([p.detach().flatten().cpu() for p in trainer.ensure_state(inp).model.parameters()])
    out = trainer.train_step(inp)
    after = torch.cat([p.detach().flatten().cpu() for p in trainer.state.model.parameters()])
    assert all(p.dtype == torch.float32 for p in trainer.state.model.parameters()), "master weights stay fp32"
    return before, after, out.metrics


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; CI has none")
        ),
    ],
)
def test_a_bf16_compute_step_moves_the_weights_as_the_fp32_step_does(make_input, mixed_refs, tmp_path, device):
    """cuda: the worker's whole GPU path (packed rows, varlen attention, compiled decoder layers and LM
    head, fused AdamW) against the fp32 step on the CPU."""
    base, fp32, m32 = deltas(make_input, mixed_refs, tmp_path, "float32")
    base16, bf16, m16 = deltas(make_input, mixed_refs, tmp_path, "bfloat16", device)
    assert torch.equal(base, base16)
    d32, d16 = fp32 - base, bf16 - base
    assert not torch.equal(d16, d32), "the bf16 step really computed in bf16"
    moved32 = d32 != 0
    assert moved32.float().mean() > 0.05, "the fp32 step moves the weights that got a gradient"
    # Adam's first step is about lr·sign(grad) wherever the gradient is not ~0: bf16 compute moves the
    # same weights, the same way, by the same amount.
    assert (d16[moved32] != 0).float().mean() > 0.99
    big = d32.abs() > 0.5 * LR
    assert (torch.sign(d16[big]) == torch.sign(d32[big])).float().mean() > 0.95
    assert torch.nn.functional.cosine_similarity(d16, d32, dim=0) > 0.95
    # The parity figure is still reported, and the bf16 loss is close to the fp32 one.
    assert "train/train_rollout_logprob_abs_diff" in m16
    assert abs(m16["train/loss"] - m32["train/loss"]) < 0.05 * max(abs(m32["train/loss"]), 1e-3) + 1e-3


def test_weights_held_in_bf16_lose_that_update(make_input, mixed_refs, tmp_path):
    """Why the master weights are fp32: the same lr·sign(g) step applied to bf16 weights rounds away."""
    trainer = Trainer(device="cpu")
    inp = TrainStepInput.model_validate(make_input(mixed_refs, run_dir=tmp_path / "held", lr=LR))
    model = trainer.ensure_state(inp).model.to(torch.bfloat16)
    before = [p.detach().clone() for p in model.parameters()]
    opt = make_optimizer(model, Hyper(lr=LR))
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before, strict=False))
    nonzero = sum(int((b != 0).sum()) for b in before)
    assert changed < 0.1 * nonzero, f"{changed} of {nonzero} bf16 weights changed"
