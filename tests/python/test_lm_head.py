"""The LM head's log-probabilities without [tokens, vocab] kept for backward (trainer/model/lm_head.py):
equal to log_softmax over the full logits — values, entropy and the gradients of the hidden states
and of the (tied) weight — to 1e-5 in fp32 on CPU, with a temperature and more rows than one chunk."""

import pytest
import torch

from trainer.model import lm_head, policy as model_mod
from trainer.model.lm_head import linear_logprobs
from trainer.model.policy import TrainSample, forward_response, load_policy


def _reference(hidden, weight, targets, temperature):
    logp_all = torch.log_softmax((hidden @ weight.T) / temperature, -1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, targets[:, None]).squeeze(-1), entropy


def test_values_entropy_and_gradients_equal_the_full_softmax(monkeypatch):
    monkeypatch.setattr(lm_head, "CHUNK_ROWS", 7)  # several chunks, the last one short
    torch.manual_seed(0)
    n, h, v = 30, 16, 97
    hidden = torch.randn(n, h, dtype=torch.float64).float().requires_grad_()
    weight = torch.randn(v, h).mul(0.5).requires_grad_()
    targets = torch.randint(0, v, (n,))
    coef = torch.randn(n)

    logp, entropy = linear_logprobs(hidden, weight, targets, 0.6, with_entropy=True)
    (logp * coef).sum().backward()
    got = (logp.detach(), entropy, hidden.grad.clone(), weight.grad.clone())
    hidden.grad, weight.grad = None, None
    ref_logp, ref_entropy = _reference(hidden, weight, targets, 0.6)
    (ref_logp * coef).sum().backward()
    want = (ref_logp.detach(), ref_entropy.detach(), hidden.grad, weight.grad)
    for name, a, b in zip(("logp", "entropy", "grad hidden", "grad weight"), got, want, strict=False):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)
    assert not entropy.requires_grad, "the entropy carries no gradient on this path"


def test_forward_response_matches_the_autograd_path_on_the_tiny_model(tiny_model, monkeypatch):
    """The model's own path (tied LM head, a multi-turn mask) against _chunked_logprobs, gradients of every parameter included."""
    policy = load_policy(tiny_model).eval()
    sample = TrainSample(
        input_ids=[100, 200, 300, 400, 64, 65, 151645, 198, 151644, 872, 66, 67, 151645],
        prompt_len=4,
        loss_mask=torch.tensor([1, 1, 1, 0, 0, 0, 1, 1, 1], dtype=torch.float32),
        rollout_logprobs=torch.zeros(9),
        advantage=1.0,
        vision=None,
        name="s",
    )

    def run(path):
        policy.zero_grad(set_to_none=True)
        if path == "autograd":
            monkeypatch.setattr(
                model_mod,
                "linear_logprobs",
                lambda h, w, t, temp, ent: model_mod._chunked_logprobs(policy.lm_head, h, t, temp, ent, False),
            )
        out = forward_response(policy, [sample], 0.6, with_entropy=True)
        (out.logprobs[0] * torch.arange(9.0)).sum().backward()
        monkeypatch.undo()
        return (
            out.logprobs[0].detach(),
            out.entropy[0].detach(),
            {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None},
        )

    fused, ref = run("fused"), run("autograd")
    torch.testing.assert_close(fused[0], ref[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused[1], ref[1], atol=1e-5, rtol=1e-5)
    assert fused[2].keys() == ref[2].keys() and len(ref[2]) > 5
    for name in ref[2]:
        torch.testing.assert_close(fused[2][name], ref[2][name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; CI has none")
def test_on_a_gpu_under_bf16_autocast_it_matches_the_autograd_path():
    """Qwen's vocabulary and a 0.5B width, more rows than one GPU chunk: the same bf16 logits, so the
    log-probabilities agree to fp32 round-off and the gradients to bf16's."""
    torch.manual_seed(0)
    n, h, v = 5000, 896, 151936
    hidden = (torch.randn(n, h, device="cuda") * 0.5).requires_grad_()
    weight = (torch.randn(v, h, device="cuda") * 0.02).requires_grad_()
    targets = torch.randint(0, v, (n,), device="cuda")
    coef = torch.randn(n, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logp, entropy = linear_logprobs(hidden, weight, targets, 0.7, with_entropy=True)
    (logp * coef).sum().backward()
    got = (logp.detach(), entropy, hidden.grad.clone(), weight.grad.clone())
    hidden.grad, weight.grad = None, None
    with torch.autocast("cuda", dtype=torch.bfloat16):
        z = (hidden @ weight.T).float() / 0.7
    ref_all = torch.log_softmax(z, -1)
    ref = ref_all.gather(-1, targets[:, None]).squeeze(-1)
    (ref * coef).sum().backward()
    torch.testing.assert_close(got[0], ref.detach(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], -(ref_all.exp() * ref_all).sum(-1).detach(), atol=1e-3, rtol=1e-3)
    for a, b in ((got[2], hidden.grad), (got[3], weight.grad)):
        assert float((a - b).norm() / b.norm()) < 2e-2


def test_linear_nll_equals_the_weighted_nll_of_the_full_softmax(monkeypatch):
    """SFT's fused loss: −Σ coef·logp and its gradients (hidden, tied weight), formed in the forward
    pass, equal autograd through log_softmax — with zero-weight rows and a scaled upstream gradient."""
    monkeypatch.setattr(lm_head, "CHUNK_ROWS", 7)
    torch.manual_seed(1)
    n, h, v = 30, 16, 97
    hidden = torch.randn(n, h).requires_grad_()
    weight = torch.randn(v, h).mul(0.5).requires_grad_()
    targets = torch.randint(0, v, (n,))
    coef = torch.rand(n)
    coef[::5] = 0.0

    loss, logp = lm_head.linear_nll(hidden, weight, targets, coef, 0.8)
    (3.0 * loss).backward()
    got = (loss.detach(), logp[coef > 0], hidden.grad.clone(), weight.grad.clone())
    hidden.grad, weight.grad = None, None
    ref_logp, _ = _reference(hidden, weight, targets, 0.8)
    ref_loss = -(ref_logp[coef > 0] * coef[coef > 0]).sum()
    (3.0 * ref_loss).backward()
    want = (ref_loss.detach(), ref_logp.detach()[coef > 0], hidden.grad, weight.grad)
    assert torch.isfinite(got[0]) and not logp.requires_grad
    for name, a, b in zip(("loss", "logp", "grad hidden", "grad weight"), got, want, strict=False):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; CI has none")
def test_linear_nll_on_a_gpu_under_bf16_autocast_matches_linear_logprobs():
    """SFT's fused loss against the weighted sum of linear_logprobs: Qwen's vocabulary, a 0.5B width,
    more rows than one GPU chunk, bf16 autocast (measured on an H200: the same loss and logp, the
    gradients to 1e-5 relative, 12.0 ms against 14.3 ms a pass)."""
    torch.manual_seed(0)
    n, h, v = 5000, 896, 151936
    hidden = (torch.randn(n, h, device="cuda") * 0.5).requires_grad_()
    weight = (torch.randn(v, h, device="cuda") * 0.02).requires_grad_()
    targets = torch.randint(0, v, (n,), device="cuda")
    coef = torch.rand(n, device="cuda") / n
    coef[::7] = 0

    def run(fused: bool):
        hidden.grad = weight.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if fused:
                loss, logp = lm_head.linear_nll(hidden, weight, targets, coef)
            else:
                logp, _ = linear_logprobs(hidden, weight, targets, 1.0)
                loss = -(logp * coef).sum()
        loss.backward()
        return loss.detach(), logp.detach(), hidden.grad.clone(), weight.grad.clone()

    got, want = run(True), run(False)
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=1e-4)
    for a, b in ((got[2], want[2]), (got[3], want[3])):
        assert float((a - b).norm() / b.norm()) < 1e-3
