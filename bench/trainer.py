"""GRPO train-step throughput: tokens/s and model FLOPs utilisation.

    python bench/trainer.py                       # ~0.5B Qwen2 (Qwen2.5-0.5B shape), on the GPU
    python bench/trainer.py --preset tiny         # the same code path on CPU (CI)
    python bench/trainer.py --plain               # and, in the same process, a plain LM step

--precision: amp (the worker with model.dtype bfloat16: fp32 master weights and AdamW state, bf16
compute under autocast; the GPU default), fp32 (the CPU default), bf16-weights (weights and AdamW
state held in bf16: fast, but at RL learning rates most updates round away — reported as
weights_moved, the share of weights a run of --steps steps at lr 1e-6 changed).
--plain: a plain transformers language-model step at the same shape and precision (full-vocabulary
loss on every position, SDPA, padded micro-batches of the same token budget), and the ratio.
--token-logprobs off: without what the worker's step also does after its commit, writing each sample's
per-token logprobs beside it (trainer.step.token_logprobs; here into a temporary local store), to time it.
--variable: a realistic GRPO batch instead of the fixed shape: --samples (e.g. 256) with prompts of
300–1500 tokens and responses of 50–4000, log-normal around 600 (seeded); `padding_efficiency` is the
share of the plain step's padded tokens that are real (the trainer packs: 1).

Random init (no download). On the fixed shape the samples are text-only and all the same length.
Each step is the trainer's own path: the model set up as the worker sets it up (trainer.model.policy.
for_training: on a GPU varlen attention and torch.compile'd decoder layers; TEMPO_RL_COMPILE=0 measures
them eager), trainer.step.gradients.accumulate_gradients (packed micro-batches, forward_response, GRPO loss,
backward), gradient clipping and one AdamW step. FLOPs per step: 6·N·tokens for the decoder (N = non-embedding parameters)
+ 6·V·H·(response tokens) for the LM head (which runs only on response positions) + causal attention
6·L·H·T per token (QKᵀ and AV, forward 2·2·T/2·H, ×3 for backward)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import contextmanager
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
sys.path.append(
    str(Path(__file__).resolve().parent)
)  # trainer_vlm and its parts (after workers: `trainer` is the package)

from trainer.contract import Hyper  # noqa: E402
from trainer.step.grpo import group_advantages  # noqa: E402
from trainer.model import varlen_attention  # noqa: E402
from trainer.model.policy import TrainSample, for_training, padded_micro_batches  # noqa: E402
from trainer.step.metrics import read_metrics  # noqa: E402
from trainer.step.gradients import NoProgress, accumulate_gradients, compute_precision, make_optimizer  # noqa: E402
from trainer.step.token_logprobs import TokenLogprobs  # noqa: E402
from tempo_common.blobs import BlobStore  # noqa: E402

# Dense bf16 tensor-core peaks (NVIDIA's datasheets): H100 SXM and H200 are the same chip.
PEAKS = {"h100": 989e12, "h200": 989e12, "a100": 312e12}

PRESETS = {
    # Qwen2.5-0.5B's shape: 494M parameters (136M of them the tied embedding).
    "0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=4096,
    ),
}


def build_model(preset: str, dtype: torch.dtype, device: torch.device):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        **PRESETS[preset], tie_word_embeddings=True, max_position_embeddings=32768, attn_implementation="sdpa"
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(dtype)
    return model.train()


def make_samples(
    n: int, seq_len: int, prompt_len: int, vocab: int, group_size: int, variable: bool = False
) -> list[TrainSample]:
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (n,), generator=g).float().tolist()
    adv = group_advantages(rewards, [str(i // group_size) for i in range(n)])
    out = []
    for i in range(n):
        if variable:
            prompt_len = int(torch.randint(300, 1501, (1,), generator=g))
            r = int(min(4000, max(50, float(torch.empty(1).log_normal_(6.4, 0.9, generator=g)))))
            seq_len = prompt_len + r
        ids = torch.randint(0, vocab, (seq_len,), generator=g).tolist()
        r = seq_len - prompt_len
        out.append(
            TrainSample(
                input_ids=ids,
                prompt_len=prompt_len,
                loss_mask=torch.ones(r),
                rollout_logprobs=-torch.rand(r, generator=g) * 5,
                advantage=float(adv[i]),
            )
        )
    return out


def step_flops(model, samples: list[TrainSample], full_vocab: bool = False) -> float:
    cfg = model.config
    n_decoder = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)
    tokens = sum(s.n_tokens for s in samples)
    # The LM head: response positions only (tempo-rl), every position (a plain LM step).
    response = sum(s.n_tokens if full_vocab else s.response_len for s in samples)
    attn = sum(6 * cfg.num_hidden_layers * cfg.hidden_size * s.n_tokens * s.n_tokens for s in samples)
    return 6 * n_decoder * tokens + 6 * cfg.vocab_size * cfg.hidden_size * response + attn


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--preset", choices=list(PRESETS), default="0.5b", help="a Qwen2 text shape (without --shape/--model)"
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", choices=["amp", "fp32", "bf16-weights"], default=None)
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--variable", action="store_true")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=32, help="samples per step (groups of --group-size)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--micro-batch-tokens", type=int, default=None, help="default 16384 (--preset), 8192 (VLM)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3, help="--preset: steps before timing (a GPU compiles first)")
    ap.add_argument("--entropy-coef", type=float, default=0.0)
    ap.add_argument(
        "--token-logprobs",
        choices=["on", "off"],
        default="on",
        help="write each sample's per-token logprobs after the step, as the worker does after its commit (default on)",
    )
    ap.add_argument(
        "--lm-head",
        choices=["fused", "autograd"],
        default="fused",
        help="fused: log-probs with the logits recomputed in backward (trainer/model/lm_head.py, the worker's path);"
        " autograd: log_softmax through autograd a chunk at a time (the path before it)",
    )
    ap.add_argument("--peak", choices=list(PEAKS), default="h100", help="the GPU whose dense bf16 peak MFU is of")
    ap.add_argument("--peak-flops", type=float, default=None, help="a peak of your own (FLOP/s), instead of --peak")
    ap.add_argument(
        "--profile", action="store_true", help="print each path's top kernels (torch.profiler, one step) to stderr"
    )
    vlm = ap.add_argument_group("the product's step on a Qwen3-VL (bench/trainer_vlm.py)")
    vlm.add_argument("--shape", choices=["qwen3-vl-2b"], default=None, help="built in memory, random weights")
    vlm.add_argument("--model", default=None, help="a model directory instead (e.g. $TEMPO_RL_TINY_MODEL)")
    vlm.add_argument("--layers", type=int, default=None, help="--shape with this many decoder layers and vision blocks")
    vlm.add_argument(
        "--samples-per-step", default=None, help="N,N,...: step i's samples (the last repeats), instead of --samples"
    )
    vlm.add_argument("--prompt-tokens", default="300-1500", help="MIN-MAX prompt tokens, the diagram's included")
    vlm.add_argument("--response-mu", type=float, default=6.4, help="log-normal response lengths: mu")
    vlm.add_argument("--response-sigma", type=float, default=0.9)
    vlm.add_argument("--max-response", type=int, default=4000)
    vlm.add_argument("--no-images", dest="images", action="store_false", help="text-only samples")
    vlm.add_argument("--checkpoint", choices=["background", "sync", "none"], default="background")
    vlm.add_argument(
        "--checkpoint-interval", type=int, default=2, help="run.checkpoint_interval (full when (N+1) % K == 0)"
    )
    vlm.add_argument("--last-step-full", action="store_true", help="the last step is the run's last: full, in the step")
    vlm.add_argument("--keep-checkpoint-files", action="store_true", help="else a measured full checkpoint's files go")
    vlm.add_argument(
        "--compile", choices=["on", "off"], default="on", help="torch.compile'd decoder layers and LM head"
    )
    vlm.add_argument(
        "--vision-checkpoint",
        choices=["on", "off"],
        default="on",
        help="the vision blocks recomputed in backward (GPU)",
    )
    vlm.add_argument(
        "--vision-once",
        choices=["on", "off"],
        default="on",
        help="on: an update's images encoded once per segment of micro-batches (GPU); off: in every micro-batch",
    )
    vlm.add_argument(
        "--vision-attention",
        choices=["packed", "model"],
        default="packed",
        help="packed: a micro-batch's images in one varlen call (GPU); model: the model's own, image by image",
    )
    vlm.add_argument(
        "--pinned-copies", choices=["on", "off"], default="on", help="inputs to the GPU without a host wait"
    )
    vlm.add_argument("--expandable", choices=["on", "off"], default="on", help="expandable segments while training")
    vlm.add_argument("--deterministic", action="store_true", help="each step as run.deterministic trains it")
    vlm.add_argument("--reserve-gib", type=float, default=0.0, help="GPU memory held throughout (an engine's share)")
    vlm.add_argument("--trace-memory", action="store_true", help="the live tensor bytes of each step (slow; CPU too)")
    vlm.add_argument("--time-budget", type=float, default=0.0, help="stop after the step that passes these seconds")
    vlm.add_argument("--out", default=None, help="the JSON, rewritten after every step")
    vlm.add_argument("--work", default=None, help="blob store, checkpoints and base model here (default: temporary)")
    vlm.add_argument("--seed", type=int, default=0)
    return ap


@contextmanager
def lm_head_path(name: str):
    """--lm-head autograd: forward_response's LM head through log_softmax and autograd, for the duration."""
    import trainer.model.policy as model_mod

    plain = model_mod.linear_logprobs
    if name == "autograd":
        model_mod.linear_logprobs = lambda h, w, t, temp, ent: model_mod._chunked_logprobs(
            lambda x: x @ w.T, h, t, temp, ent, False
        )
    try:
        yield
    finally:
        model_mod.linear_logprobs = plain


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    args.peak_flops = args.peak_flops or PEAKS[args.peak]
    vlm = args.shape is not None or args.model is not None
    if args.micro_batch_tokens is None:
        args.micro_batch_tokens = 8192 if vlm else 16384
    device = torch.device(args.device)
    with lm_head_path(args.lm_head):
        if vlm:
            from trainer_vlm import run_product

            result = run_product(args)
            print(json.dumps(result))
            return result
        precision = args.precision or ("amp" if device.type == "cuda" else "fp32")
        result = {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "precision": precision,
            "preset": args.preset,
            "lm_head": args.lm_head,
            "torch": torch.__version__,
            "peak_flops": args.peak_flops,
            "tempo_rl": run(args, device, precision, plain=False),
        }
        if args.plain:
            result["plain"] = run(args, device, precision, plain=True)
            result["ratio_tokens_per_second"] = round(
                result["tempo_rl"]["tokens_per_second"] / result["plain"]["tokens_per_second"], 3
            )
    print(json.dumps(result))
    return result


def plain_step(model, samples: list[TrainSample], micro_batch_tokens: int, compute_dtype: str) -> dict[str, float]:
    """A plain transformers LM step: full-vocabulary loss on every position, the same padded micro-batches."""
    device = next(model.parameters()).device
    total, n = 0.0, 0
    for batch in padded_micro_batches(samples, micro_batch_tokens):
        width = max(s.n_tokens for s in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        for j, s in enumerate(batch):
            ids[j, : s.n_tokens] = torch.tensor(s.input_ids)
        ids = ids.to(device)
        with compute_precision(model, compute_dtype):
            loss = model(input_ids=ids, labels=ids).loss
        (loss * len(batch) / len(samples)).backward()
        total += float(loss.detach()) * len(batch)
        n += 1
    return {"train/loss": total / len(samples), "train/n_micro_batches": float(n)}


def run(args, device: torch.device, precision: str, plain: bool) -> dict:
    dtype = torch.bfloat16 if precision == "bf16-weights" else torch.float32
    model = build_model(args.preset, dtype, device)
    if not plain:
        for_training(model)  # the worker's set-up: varlen attention, compiled decoder layers (GPU)
    varlen = varlen_attention.in_use(model)
    n_params = sum(p.numel() for p in model.parameters())
    hyper = Hyper(
        lr=1e-6,
        micro_batch_tokens=args.micro_batch_tokens,
        entropy_coef=args.entropy_coef,
        compute_dtype="bfloat16" if precision == "amp" else "float32",
    )
    optimizer = make_optimizer(model, hyper)
    samples = make_samples(
        args.samples, args.seq_len, args.prompt_len, model.config.vocab_size, args.group_size, variable=args.variable
    )
    padded = sum(len(b) * max(s.n_tokens for s in b) for b in padded_micro_batches(samples, args.micro_batch_tokens))
    flops = step_flops(model, samples, full_vocab=plain)
    tokens = sum(s.n_tokens for s in samples)
    # on the host: a copy on the GPU would count in the step's peak memory
    start = [p.detach().to("cpu", copy=True) for p in model.parameters()]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for i, s in enumerate(samples):
        s.name = f"bench/0/{i // args.group_size}/{i % args.group_size}"
    record_tokens = not plain and args.token_logprobs == "on"
    scratch = tempfile.TemporaryDirectory(prefix="bench-token-logprobs-")
    store = BlobStore(scratch.name)
    times, write_times, metrics = [], [], {}
    profiler = None
    for step in range(args.warmup + args.steps):
        if args.profile and step == args.warmup:
            profiler = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            )
            profiler.__enter__()
        sync()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        record = TokenLogprobs() if record_tokens else None
        metrics = (
            plain_step(model, samples, args.micro_batch_tokens, hyper.compute_dtype)
            if plain
            else accumulate_gradients(model, samples, hyper, NoProgress(), record=record)
        )
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), hyper.grad_clip)
        if not plain:
            metrics, grad_norm = read_metrics(metrics, grad_norm)  # the worker's one sync per update
        optimizer.step()
        t_write = time.perf_counter()
        if record is not None:
            record.write(store, step)
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
            write_times.append(time.perf_counter() - t_write)
        if profiler is not None:
            profiler.__exit__(None, None, None)
            sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
            print(
                f"== {'plain' if plain else 'tempo-rl'}\n" + profiler.key_averages().table(sort_by=sort, row_limit=30),
                file=sys.stderr,
            )
            profiler = None
    seconds = sum(times) / len(times)
    moved = sum(int((p.detach().cpu() != s).sum()) for p, s in zip(model.parameters(), start, strict=False)) / n_params
    out = {
        "params": n_params,
        "tokens_per_step": tokens,
        "micro_batches": int(metrics["train/n_micro_batches"]),
        "padding_efficiency": round(tokens / padded, 3) if plain else 1.0,
        "varlen_attention": varlen,
        "compiled": not plain and device.type == "cuda" and os.environ.get("TEMPO_RL_COMPILE", "1") != "0",
        "step_seconds": round(seconds, 4),
        "token_logprobs": record_tokens,
        "token_logprobs_write_seconds": round(sum(write_times) / len(write_times), 4) if record_tokens else None,
        "tokens_per_second": round(tokens / seconds, 1),
        "tflops_per_second": round(flops / seconds / 1e12, 2),
        "mfu": round(flops / seconds / args.peak_flops, 4),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
        "loss": metrics["train/loss"],
        "grad_norm": float(grad_norm),
        "weights_moved": round(moved, 4),
    }
    del model, optimizer
    scratch.cleanup()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


if __name__ == "__main__":
    main()
