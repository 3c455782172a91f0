"""Where a train step's time goes, phase by phase, on the GPU's own clock (bench/trainer.py).

Markers are CUDA events recorded on the stream as the host reaches them (on a CPU, the wall clock):
hooks on the vision tower and the language model (forward start and end; gradient hooks on their
outputs and on the decoder's input embeddings for the backward), around the LM head, at each
micro-batch's end (the step's own progress heartbeat) and around the optimizer step. The time between
two markers goes to the phase the pair names: `host_prep` (from the previous micro-batch's end to
this one's first kernel: the GPU idles while the host prepares the inputs), `vision_fwd`,
`embed_merge`, `decoder_fwd`, `lm_head_fwd`, `loss_lm_head_bwd`, `decoder_bwd`, `vision_embed_bwd`,
`clip_norm_metrics` (gradient clipping and the one device→host read of the metrics), `optimizer`."""

from __future__ import annotations

import threading
import time

import torch

import trainer.model.policy as policy

PAIRS = {
    ("vision_fwd_start", "vision_fwd_end"): "vision_fwd",
    ("vision_fwd_end", "decoder_fwd_start"): "embed_merge",
    ("decoder_fwd_start", "decoder_fwd_end"): "decoder_fwd",
    ("decoder_fwd_end", "lm_head_fwd_start"): "lm_head_prep",
    ("lm_head_fwd_start", "lm_head_fwd_end"): "lm_head_fwd",
    ("lm_head_fwd_end", "lm_head_bwd_end"): "loss_lm_head_bwd",
    ("lm_head_bwd_end", "decoder_bwd_end"): "decoder_bwd",
    ("decoder_bwd_end", "mb_end"): "vision_embed_bwd",
    ("mb_end", "opt_start"): "clip_norm_metrics",
    ("opt_start", "opt_end"): "optimizer",
}
STARTS = {"vision_fwd_start", "decoder_fwd_start"}


class Phases:
    """Markers in order for one step at a time; durations() once the step's work is done (sync())."""

    def __init__(self, model, optimizer, cuda: bool):
        self.cuda = cuda
        self.marks: list[tuple[str, object]] = []
        self.enabled = False
        inner = model.model
        if hasattr(inner, "visual"):
            inner.visual.register_forward_pre_hook(lambda m, a: self.mark("vision_fwd_start"))
            inner.visual.register_forward_hook(self._vision_out)
        text = inner.language_model if hasattr(inner, "language_model") else inner
        text.register_forward_pre_hook(self._decoder_in, with_kwargs=True)
        text.register_forward_hook(self._decoder_out)
        optimizer.register_step_pre_hook(lambda o, a, k: self.mark("opt_start"))
        optimizer.register_step_post_hook(lambda o, a, k: self.mark("opt_end"))
        plain = policy.linear_logprobs

        def timed(*args, **kwargs):
            self.mark("lm_head_fwd_start")
            out = plain(*args, **kwargs)
            self.mark("lm_head_fwd_end")
            return out

        self._plain_lm_head = plain
        policy.linear_logprobs = timed  # forward_response's call, by its module's name

    def close(self) -> None:
        policy.linear_logprobs = self._plain_lm_head

    def mark(self, name: str) -> None:
        if not self.enabled:
            return
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((name, event))
        else:
            self.marks.append((name, time.perf_counter()))

    def _on_grad(self, t, name: str) -> None:
        if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled():
            t.register_hook(lambda g: self.mark(name))

    def _vision_out(self, module, args, out) -> None:
        self.mark("vision_fwd_end")

    def _decoder_in(self, module, args, kwargs) -> None:
        self.mark("decoder_fwd_start")
        self._on_grad(kwargs.get("inputs_embeds"), "decoder_bwd_end")

    def _decoder_out(self, module, args, out) -> None:
        self.mark("decoder_fwd_end")
        self._on_grad(getattr(out, "last_hidden_state", None), "lm_head_bwd_end")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def durations(self) -> dict[str, float]:
        """Milliseconds per phase over the step's markers (then forgotten)."""
        out: dict[str, float] = {}
        for (a, ta), (b, tb) in zip(self.marks, self.marks[1:], strict=False):
            name = PAIRS.get((a, b)) or ("host_prep" if b in STARTS else f"{a}->{b}")
            ms = ta.elapsed_time(tb) if self.cuda else (tb - ta) * 1e3
            out[name] = out.get(name, 0.0) + ms
        self.marks = []
        return out


class StepProgress:
    """The Progress a bench step runs with: marks each micro-batch's end, times the samples' load (and
    keeps the samples), notes when the commit starts. Entered around one train_step."""

    def __init__(self, phases: Phases, trainer):
        self.phases, self.trainer = phases, trainer
        self.samples: list = []
        self.load_seconds = 0.0
        self.commit_started: float | None = None
        self._t0 = 0.0
        self._thread = threading.get_ident()
        self._last: dict | None = None

    def heartbeat(self, details: dict) -> None:
        # the step's own calls only: its heartbeat thread repeats the latest details every second
        if threading.get_ident() != self._thread or details is self._last:
            return
        self._last = details
        phase = details.get("phase")
        if phase == "training":
            self.phases.mark("mb_end")
        elif phase == "committing":
            self.commit_started = time.perf_counter() - self._t0

    def is_cancelled(self) -> bool:
        return False

    def __enter__(self) -> StepProgress:
        plain = self.trainer.load_samples

        def load(*args, **kwargs):
            t = time.perf_counter()
            self.samples = plain(*args, **kwargs)
            self.load_seconds = time.perf_counter() - t
            self.phases.mark("load_end")
            return self.samples

        self.trainer.load_samples = load
        self.phases.enabled = True
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.phases.enabled = False
        del self.trainer.load_samples  # the class's own again
