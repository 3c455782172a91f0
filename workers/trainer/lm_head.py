"""Log-probabilities of chosen tokens through the LM head without keeping [tokens, vocab] for backward.

`linear_logprobs(hidden, weight, targets, temperature, allowed, with_entropy)` computes, for each row,
log softmax((hidden · weightᵀ) / T)[target] — and the entropy of that softmax, without a gradient —
a chunk of rows at a time. Only each row's log-sum-exp is saved; backward recomputes a chunk's logits
and forms (onehot − softmax) · grad / T itself, so the 150k-wide blocks exist one chunk at a time in
the forward and in the backward (autograd through log_softmax would keep every chunk's fp32
log-probabilities, 0.6 GB per 1024 rows at Qwen's vocabulary, until backward). The temperature is
folded into the same pass; the matmuls run in the autocast dtype when autocast is on (as the LM head
would), the softmax in fp32. The approach is that of fused linear cross-entropy kernels (Liger,
Apple's Cut Cross-Entropy), in plain PyTorch."""
from __future__ import annotations

import torch

# Rows per chunk: a [rows, vocab] fp32 block is 0.6 GB at 1024 rows of Qwen's 152k vocabulary.
CHUNK_ROWS = 1024
CHUNK_ROWS_CUDA = 4096


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    dev = t.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else t.dtype


def _logits(h: torch.Tensor, w: torch.Tensor, inv_t: float, allowed: torch.Tensor | None):
    """fp32 logits / T of the rows `h` (already in the compute dtype of `w`)."""
    z = (h @ w.T).float().mul_(inv_t)
    return z if allowed is None else z.masked_fill_(~allowed, float("-inf"))


def _chunk(t: torch.Tensor) -> int:
    return CHUNK_ROWS_CUDA if t.is_cuda else CHUNK_ROWS


class _LinearLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_t, allowed, with_entropy, dtype):
        n, c = hidden.shape[0], _chunk(hidden)
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logp)
        entropy = torch.empty_like(logp) if with_entropy else None
        w, h_all = weight.to(dtype), hidden.to(dtype)  # cast once, not per chunk
        for s in range(0, n, c):
            z = _logits(h_all[s:s + c], w, inv_t, allowed)
            l = torch.logsumexp(z, dim=-1)
            lse[s:s + c] = l
            logp[s:s + c] = z.gather(-1, targets[s:s + c, None]).squeeze(-1) - l
            if entropy is not None:
                # H = lse − Σ p·z; masked tokens have p = 0 (their −inf logit is read as 0)
                zf = z if allowed is None else z.masked_fill(~allowed, 0.0)
                entropy[s:s + c] = l - (torch.exp(z - l[:, None]) * zf).sum(-1)
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
        for s in range(0, hidden.shape[0], c):
            h = h_all[s:s + c]
            # d logp / d z = onehot − softmax; z = h·wᵀ / T
            g = _logits(h, w, ctx.inv_t, allowed).sub_(lse[s:s + c, None]).exp_().neg_()
            g.scatter_add_(-1, targets[s:s + c, None], torch.ones_like(g[:, :1]))
            g = g.mul_(grad_logp[s:s + c, None] * ctx.inv_t).to(dtype)
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
