"""A GPU engine as tempo-rl drives it (vLLM on CUDA, started by `tempo-rl engine start` with
engines.colocate): weight-version labels on every generated turn, sleep and wake at both levels with
the same seeded tokens afterwards, and a colocated sync that wakes a sleeping engine into new weights.

Runs where TEMPO_RL_TEST_GPU_ENGINE_URL names such an engine serving TEMPO_RL_TEST_GPU_ENGINE_MODEL on
this process's GPU (scripts/gpu-check.sh starts one); skips, saying so, everywhere else."""

from __future__ import annotations

import os
import time

import pytest
import requests
import torch

from trainer.contract import SyncWeightsInput
from trainer.model.policy import load_policy
from trainer.weights.ipc import IpcLoader
from trainer.weights.sync import EngineClient, sleep_engines, sync_weights_phased

URL = os.environ.get("TEMPO_RL_TEST_GPU_ENGINE_URL", "").rstrip("/")
pytestmark = pytest.mark.skipif(
    not URL or not torch.cuda.is_available(),
    reason="needs a CUDA device and a GPU engine at TEMPO_RL_TEST_GPU_ENGINE_URL (scripts/gpu-check.sh)",
)


def generate(seed: int) -> dict:
    prompt = requests.post(
        f"{URL}/tokenize",
        json={"messages": [{"role": "user", "content": "List four shapes."}], "add_generation_prompt": True},
        timeout=60,
    ).json()["tokens"]
    body = {
        "request_id": f"gpu-{seed}-{time.time_ns()}",
        "token_ids": prompt,
        "output_mode": "tokens",
        "sampling_params": {"max_tokens": 16, "temperature": 1.0, "top_p": 1.0, "seed": seed, "logprobs": 0},
    }
    resp = requests.post(f"{URL}/inference/v1/generate", json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]


def test_every_generated_turn_carries_the_engines_weight_version():
    client = EngineClient(URL)
    client.set_weight_version("41")
    assert client.weight_version() == "41"
    choice = generate(1)
    assert choice["weight_versions"] == [{"version": "41", "start": 0, "end": len(choice["token_ids"])}]


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_the_gpu_and_wake_gives_the_same_seeded_tokens(level):
    client = EngineClient(URL)
    model = load_policy(os.environ["TEMPO_RL_TEST_GPU_ENGINE_MODEL"], "cuda").eval()
    sync = lambda v, wake: sync_weights_phased(  # noqa: E731
        SyncWeightsInput(
            run_id="gpu-test",
            weight_version=v,
            checkpoint="x",
            engines=[URL],
            pause_mode="wait",
            transport="ipc",
            engine_dtype="bfloat16",
            wake_engines=wake,
        ),
        IpcLoader(model, torch.bfloat16, 256 * 2**20),
        before_kv_wake=torch.cuda.empty_cache,
    )
    assert sync(10 * level, False).engines[0].ok  # the engine serves exactly this process's weights
    before = generate(7)
    free0 = torch.cuda.mem_get_info()[0]
    seconds, errors = sleep_engines([URL], level)
    assert not errors and client.is_sleeping()
    freed = torch.cuda.mem_get_info()[0] - free0
    assert freed > 2**30, f"sleep level {level} freed {freed / 2**30:.2f} GiB only"
    out = sync(10 * level + 1, True)  # wake: weights, the ipc load, then the KV cache
    assert out.engines[0].ok, out.engines[0].error
    assert not client.is_sleeping() and client.weight_version() == str(10 * level + 1)
    after = generate(7)
    assert after["token_ids"] == before["token_ids"]
    gap = max(
        abs(a["logprob"] - b["logprob"])
        for a, b in zip(after["logprobs"]["content"], before["logprobs"]["content"], strict=False)
    )
    assert gap < 1e-3, gap
    print(f"sleep level {level}: {seconds:.3f} s, freed {freed / 2**30:.1f} GiB; sync with wake {out.timings}")
