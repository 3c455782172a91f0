"""Log-probabilities of chosen tokens through the LM head without keeping [tokens, vocab] for backward.

`linear_logprobs(hidden, weight, targets, temperature, allowed, with_entropy)` computes, for each row,
log softmax((hidden · weightᵀ) / T)[target] — and the entropy of that softmax, without a gradient —
a chunk of rows at a time. Only each row's log-sum-exp is saved; backward recomputes a chunk's logits
and forms (onehot − softmax) · grad / T itself, so the 150k-wide blocks exist one chunk at a time in
the forward and in the backward (autograd through log_softmax would keep every chunk's fp32
log-probabilities, 0.6 GB per 1024 rows at Qwen's vocabulary, until backward). The temperature is
folded into the same pass; the matmuls run in the autocast dtype when autocast is on (as the LM head
would), the softmax in fp32 — on a GPU fused by torch.compile. The approach is that of fused linear
cross-entropy kernels (Liger, Apple's Cut Cross-Entropy), in plain PyTorch."""
from __future__ import annotations

import functools

import torch

# Fuse each chunk's fp32 softmax arithmetic with torch.compile on a GPU (eager on CPU, and when False).
COMPILE_ON_GPU = True

# Rows per chunk: a [rows, vocab] fp32 block is 0.6 GB at 1024 rows of Qwen's 152k vocabulary.
CHUNK_ROWS = 1024
CHUNK_ROWS_CUDA = 4096


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    dev = t.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else t.dtype


def _scaled(z: torch.Tensor, inv_t: float, allowed: torch.Tensor | None) -> torch.Tensor:
    """fp32 logits / T, −inf outside `allowed`. In place where `z` is already fp32: `z` is a chunk's
    fresh matmul output, and a [rows, vocab] copy costs as much as the arithmetic (eager, on a CPU)."""
    zf = z.float()
    if inv_t != 1.0:
        zf = zf.mul_(inv_t)
    return zf if allowed is None else zf.masked_fill_(~allowed, float("-inf"))


def _forward_rows(z: torch.Tensor, targets: torch.Tensor, inv_t: float, allowed: torch.Tensor | None,
                  with_entropy: bool):
    """(log-sum-exp, logp of the target, entropy or None) of each row of the logits `z`."""
    zf = _scaled(z, inv_t, allowed)
    lse = torch.logsumexp(zf, dim=-1)
    logp = zf.gather(-1, targets[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return lse, logp, None
    # H = lse − Σ p·z; masked tokens have p = 0 (their −inf logit is read as 0)
    finite = zf if allowed is None else zf.masked_fill(~allowed, 0.0)
    return lse, logp, lse - (torch.exp(zf - lse[:, None]) * finite).sum(-1)


def _logit_grads(z: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor, coef: torch.Tensor, inv_t: float,
                 allowed: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """d(Σ grad·logp)/dz = (onehot − softmax) · grad / T, in the compute dtype (`coef` = grad / T)."""
    g = _scaled(z, inv_t, allowed).sub_(lse[:, None]).exp_().mul_(-coef[:, None])  # in place: one fp32 block
    return g.scatter_add_(-1, targets[:, None], coef[:, None]).to(dtype)


def _chunk(t: torch.Tensor) -> int:
    return CHUNK_ROWS_CUDA if t.is_cuda else CHUNK_ROWS


@functools.cache
def _compiled(fn):
    # One fused kernel per chunk instead of seven passes over a [rows, vocab] fp32 block (about a
    # sixth of a 0.5B model's step on an H200); compiled on first use, for any number of rows.
    return torch.compile(fn, dynamic=True)


def _kernel(fn, t: torch.Tensor):
    return _compiled(fn) if t.is_cuda and COMPILE_ON_GPU else fn


class _LinearLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_t, allowed, with_entropy, dtype):
        n, c = hidden.shape[0], _chunk(hidden)
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logp)
        entropy = torch.empty_like(logp) if with_entropy else None
        w, h_all = weight.to(dtype), hidden.to(dtype)  # cast once, not per chunk
        rows = _kernel(_forward_rows, hidden)
        for s in range(0, n, c):
            l, lp, ent = rows(h_all[s:s + c] @ w.T, targets[s:s + c], inv_t, allowed, with_entropy)
            lse[s:s + c], logp[s:s + c] = l, lp
            if entropy is not None:
                entropy[s:s + c] = ent
        ctx.save_for_backward(hidden, weight, targets, lse, allowed)
        ctx.inv_t, ctx.dtype = inv_t, dtype
        ctx.mark_non_differentiable(*([entropy] if entropy is not None else []))
        return (logp, entropy) if entropy is not None else (logp,)

    @staticmethod
    def backward(ctx, grad_logp, *_):
        hidden, weight, targets, lse, allowed = ctx.saved_tensors
        dtype = ctx.dtype
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        w, h_all, c = weight.to(dtype), hidden.to(dtype), _chunk(hidden)
        grads = _kernel(_logit_grads, hidden)
        coef = grad_logp * ctx.inv_t
        for s in range(0, hidden.shape[0], c):
            h = h_all[s:s + c]
            g = grads(h @ w.T, lse[s:s + c], targets[s:s + c], coef[s:s + c], ctx.inv_t, allowed, dtype)
            if grad_h is not None:
                grad_h[s:s + c] = (g @ w).to(hidden.dtype)
            if grad_w is not None:
                grad_w += (g.T @ h).float()
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None, None, None


def linear_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float,
                    allowed: torch.Tensor | None = None, with_entropy: bool = False):
    """(logp of each row's target, its entropy or None): see the module's docstring. `allowed`: a bool
    mask over the vocabulary (the engine's allowed_token_ids), None for all."""
    out = _LinearLogprobs.apply(hidden, weight, targets, 1.0 / temperature, allowed, with_entropy,
                                _compute_dtype(hidden))
    return out[0], out[1] if with_entropy else None
