"""Log-probabilities of chosen tokens through the LM head without keeping [tokens, vocab] for backward.

`linear_logprobs(hidden, weight, targets, temperature, with_entropy)` computes, for each row,
log softmax((hidden · weightᵀ) / T)[target] — and the entropy of that softmax, without a gradient —
a chunk of rows at a time. Only each row's log-sum-exp is saved; backward recomputes a chunk's logits
and forms (onehot − softmax) · grad / T itself, so the 150k-wide blocks exist one chunk at a time in
the forward and in the backward (autograd through log_softmax would keep every chunk's fp32
log-probabilities, 0.6 GB per 1024 rows at Qwen's vocabulary, until backward). The temperature is
folded into the same pass; the matmuls run in the autocast dtype when autocast is on (as the LM head
would), the softmax in fp32 — on a GPU fused by torch.compile. The approach is that of fused linear
cross-entropy kernels (Liger, Apple's Cut Cross-Entropy), in plain PyTorch.

`linear_nll(hidden, weight, targets, coef)` is the SFT case: a loss linear in the log-probabilities
(−Σ coef·logp), so each chunk's gradient is known in the forward pass and formed there — the logits
are computed and exponentiated once instead of twice, as Liger's fused linear cross-entropy does."""

from __future__ import annotations

import functools

import torch

# Fuse each chunk's fp32 softmax arithmetic with torch.compile on a GPU (eager on CPU, and when False).
COMPILE_ON_GPU = True

# Rows per chunk: a [rows, vocab] fp32 block is 0.6 GB at 1024 rows of Qwen's 152k vocabulary. On a
# CPU, blocks of 64 rows (39 MB) are written into one buffer reused chunk after chunk: a fresh 0.6 GB
# block each chunk is mostly page faults (measured on 2 cores, 1280 rows: forward 0.73 s → 0.21 s).
CHUNK_ROWS = 64
CHUNK_ROWS_CUDA = 4096


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    dev = t.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else t.dtype


def _scaled(z: torch.Tensor, inv_t: float) -> torch.Tensor:
    """fp32 logits / T. In place where `z` is already fp32: `z` is a chunk's fresh matmul output, and a
    [rows, vocab] copy costs as much as the arithmetic (eager, on a CPU)."""
    zf = z.float()
    return zf.mul_(inv_t) if inv_t != 1.0 else zf


def _forward_rows(z: torch.Tensor, targets: torch.Tensor, inv_t: float, with_entropy: bool):
    """(log-sum-exp, logp of the target, entropy or None) of each row of the logits `z`."""
    zf = _scaled(z, inv_t)
    lse = torch.logsumexp(zf, dim=-1)
    logp = zf.gather(-1, targets[:, None]).squeeze(-1) - lse
    if not with_entropy:
        return lse, logp, None
    # H = lse − Σ p·z
    return lse, logp, lse - (torch.exp(zf - lse[:, None]) * zf).sum(-1)


def _shifted(z: torch.Tensor, targets: torch.Tensor, inv_t: float):
    """(y = z/T − max, each row's target logit z/T, the max) of a chunk's logits, y in place on `z`
    where it is fp32."""
    zf = _scaled(z, inv_t)
    picked = zf.gather(-1, targets[:, None]).squeeze(-1)
    top = zf.amax(-1, keepdim=True)
    return zf.sub_(top), picked, top  # y at most 0


def _forward_rows_in_place(
    z: torch.Tensor,
    targets: torch.Tensor,
    inv_t: float,
    with_entropy: bool,
    spare: torch.Tensor | None,
):
    """_forward_rows for eager (CPU) passes: in place on the chunk's own block `z`, and on `spare`
    (a second reused block) for the entropy — no [rows, vocab] temporaries (measured on 2 cores)."""
    y, picked, top = _shifted(z, targets, inv_t)
    if not with_entropy:
        shifted_lse = y.exp_().sum(-1).log_()
        lse = shifted_lse + top[:, 0]
        return lse, picked - lse, None
    e = torch.exp(y, out=spare[: y.shape[0]])
    total = e.sum(-1)
    # H = −Σ p·log p = log Σe − Σ e·y / Σe, with y = z − max
    shifted_lse = total.log()
    lse = shifted_lse + top[:, 0]
    return lse, picked - lse, shifted_lse - e.mul_(y).sum(-1) / total


def _logit_grads(
    z: torch.Tensor,
    lse: torch.Tensor,
    targets: torch.Tensor,
    coef: torch.Tensor,
    inv_t: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """d(Σ grad·logp)/dz = (onehot − softmax) · grad / T, in the compute dtype (`coef` = grad / T)."""
    g = _scaled(z, inv_t).sub_(lse[:, None]).exp_().mul_(-coef[:, None])  # in place: one fp32 block
    return g.scatter_add_(-1, targets[:, None], coef[:, None]).to(dtype)


def _nll_rows(z: torch.Tensor, targets: torch.Tensor, coef: torch.Tensor, inv_t: float):
    """(logp of each row's target, d(−Σ coef·logp)/dz = coef·(softmax − onehot)/T), in place on the
    chunk's logits `z` where they are fp32: one exp pass gives both."""
    y, picked, top = _shifted(z, targets, inv_t)
    e = y.exp_()
    total = e.sum(-1)
    c = coef * inv_t
    g = e.mul_((c / total)[:, None]).scatter_add_(-1, targets[:, None], -c[:, None])
    return picked - top[:, 0] - total.log(), g


def _add_chunk_grads(
    g: torch.Tensor,
    h: torch.Tensor,
    w: torch.Tensor,
    rows: slice,
    grad_h: torch.Tensor | None,
    grad_w: torch.Tensor | None,
) -> None:
    """A chunk's logit gradients `g` (compute dtype) into the hidden states' rows and the fp32 weight's."""
    if grad_h is not None:
        grad_h[rows] = (g @ w).to(grad_h.dtype)
    if grad_w is not None:
        if g.dtype == torch.float32:
            grad_w.addmm_(g.T, h)  # no [vocab, hidden] temporary per chunk
        else:
            grad_w += (g.T @ h).float()


def _chunk(t: torch.Tensor) -> int:
    return CHUNK_ROWS_CUDA if t.is_cuda else CHUNK_ROWS


@functools.cache
def _compiled(fn):
    # One fused kernel per chunk instead of seven passes over a [rows, vocab] fp32 block (about a
    # sixth of a 0.5B model's step on an H200); compiled on first use, for any number of rows.
    return torch.compile(fn, dynamic=True)


def _kernel(fn, t: torch.Tensor):
    return _compiled(fn) if t.is_cuda and COMPILE_ON_GPU else fn


def _logits(h: torch.Tensor, w: torch.Tensor, buf: torch.Tensor | None) -> torch.Tensor:
    """h · wᵀ, into `buf` (its first rows) where there is one."""
    return h @ w.T if buf is None else torch.mm(h, w.T, out=buf[: h.shape[0]])


def _block_buffer(h: torch.Tensor, w: torch.Tensor, rows: int, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """The reused [rows, vocab] block of an eager CPU pass (None on a GPU: the caching allocator
    reuses blocks itself, and compiled kernels take their own)."""
    return (
        None if h.is_cuda else torch.empty(min(rows, h.shape[0]), w.shape[0], dtype=dtype or h.dtype, device=h.device)
    )


class _LinearLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_t, with_entropy, dtype):
        n, c = hidden.shape[0], _chunk(hidden)
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logp)
        entropy = torch.empty_like(logp) if with_entropy else None
        w, h_all = weight.to(dtype), hidden.to(dtype)  # cast once, not per chunk
        buf = _block_buffer(h_all, w, c)
        rows = (
            _kernel(_forward_rows, hidden)
            if buf is None
            else functools.partial(
                _forward_rows_in_place, spare=_block_buffer(h_all, w, c, torch.float32) if with_entropy else None
            )
        )
        for s in range(0, n, c):
            l, lp, ent = rows(_logits(h_all[s : s + c], w, buf), targets[s : s + c], inv_t, with_entropy)
            lse[s : s + c], logp[s : s + c] = l, lp
            if entropy is not None:
                entropy[s : s + c] = ent
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.inv_t, ctx.dtype = inv_t, dtype
        ctx.mark_non_differentiable(*([entropy] if entropy is not None else []))
        return (logp, entropy) if entropy is not None else (logp,)

    @staticmethod
    def backward(ctx, grad_logp, *_):
        hidden, weight, targets, lse = ctx.saved_tensors
        dtype = ctx.dtype
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        )
        w, h_all, c = weight.to(dtype), hidden.to(dtype), _chunk(hidden)
        grads, buf = _kernel(_logit_grads, hidden), _block_buffer(h_all, w, c)
        coef = grad_logp * ctx.inv_t
        for s in range(0, hidden.shape[0], c):
            h = h_all[s : s + c]
            g = grads(_logits(h, w, buf), lse[s : s + c], targets[s : s + c], coef[s : s + c], ctx.inv_t, dtype)
            _add_chunk_grads(g, h, w, slice(s, s + c), grad_h, grad_w)
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None, None


class _LinearNll(torch.autograd.Function):
    """−Σ coef·logp with the gradients formed in the forward pass (as fused linear cross-entropy
    kernels do): each chunk's logits are computed and exponentiated once, where linear_logprobs'
    backward recomputes them (on 2 CPU cores, 1,200 SFT rows: 1.1 s against 1.8–2.0 s). The price is
    the weight's gradient, [vocab, hidden] fp32, held from the forward to the backward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, coef, inv_t, dtype):
        n, c = hidden.shape[0], _chunk(hidden)
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        w, h_all = weight.to(dtype), hidden.to(dtype)
        rows, buf = _kernel(_nll_rows, hidden), _block_buffer(h_all, w, c)
        for s in range(0, n, c):
            h = h_all[s : s + c]
            lp, g = rows(_logits(h, w, buf), targets[s : s + c], coef[s : s + c], inv_t)
            logp[s : s + c] = lp
            _add_chunk_grads(g.to(dtype), h, w, slice(s, s + c), grad_h, grad_w)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(logp)
        # rows with coef 0 do not count, whatever their logp
        return -(coef * logp.masked_fill(coef == 0, 0.0)).sum(), logp

    @staticmethod
    def backward(ctx, grad_loss, _):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss, (grad_w * grad_loss).to(ctx.weight_dtype), None, None, None, None


def linear_nll(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    coef: torch.Tensor,
    temperature: float = 1.0,
):
    """(loss −Σ coef·logp, logp of each row's target without a gradient): a loss linear in the
    log-probabilities (SFT's masked NLL), its gradients computed in the forward pass. `coef`: one
    weight per row."""
    return _LinearNll.apply(hidden, weight, targets, coef.to(torch.float32), 1.0 / temperature, _compute_dtype(hidden))


def linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool = False,
):
    """(logp of each row's target, its entropy or None): see the module's docstring."""
    out = _LinearLogprobs.apply(hidden, weight, targets, 1.0 / temperature, with_entropy, _compute_dtype(hidden))
    return out[0], out[1] if with_entropy else None
