"""The engine side without an engine: the command line adapted per vLLM release (compat.py), the
weight-version labels for releases without them (labels.py, driven as an ASGI app), and the bucket
protocol's plan, views and handle encoding (weight_buckets.py)."""

import asyncio
import json

import pytest
import torch

from tempo_common import weight_buckets
from tempo_engine import compat, deterministic, labels

ARGV = ["--model", "m", "--enable-scale-out", "--logprobs-mode", "processed_logprobs"]
V032 = compat.Release(new_launcher=True, scale_out_flag=True, weight_labels=True, flash_attn_2=None)
V026 = compat.Release(new_launcher=False, scale_out_flag=False, weight_labels=False, flash_attn_2=False)


def test_the_command_line_written_for_032_is_left_alone_on_032():
    assert compat.adapt(ARGV, V032) == ARGV


def test_on_026_scale_out_is_dropped_and_labels_and_the_vision_attention_added():
    out = compat.adapt(ARGV, V026)
    assert "--enable-scale-out" not in out
    assert out[out.index("--middleware") + 1] == "tempo_engine.labels.WeightLabels"
    assert out[out.index("--mm-encoder-attn-backend") + 1] == "TORCH_SDPA"
    mine = compat.adapt([*ARGV, "--mm-encoder-attn-backend=FLASH_ATTN"], V026)
    assert mine.count("--mm-encoder-attn-backend=FLASH_ATTN") == 1 and "TORCH_SDPA" not in mine, "a user's choice stays"


def test_routed_experts_get_the_model_runner_that_captures_them_on_each_release():
    argv = [*ARGV, "--enable-return-routed-experts"]
    assert compat.runner_env(argv, V032, {}) == {"VLLM_USE_V2_MODEL_RUNNER": "1"}, "0.32: V2 only captures them"
    assert compat.runner_env(argv, V026, {}) == {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "0.26: V2 refuses to capture them"
    assert compat.runner_env(argv, V026, {"VLLM_USE_V2_MODEL_RUNNER": "1"}) == {}, "the environment wins"
    assert compat.runner_env(ARGV, V032, {}) == {}


def test_labels_living_in_one_api_server_refuse_several():
    with pytest.raises(SystemExit, match="api-server-count 2"):
        compat.adapt([*ARGV, "--api-server-count", "2"], V026)
    assert compat.adapt([*ARGV, "--api-server-count", "2"], V032)[-1] == "2", "native labels: any count"


def _model_dir(tmp_path, model_type: str) -> str:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    return str(tmp_path)


def test_cuda_graphs_auto_only_where_parity_was_measured(tmp_path):
    qwen = ["--model", _model_dir(tmp_path, "qwen3_vl"), compat.CUDA_GRAPHS_FLAG, "auto"]
    out, said = compat.execution(qwen, "0.26.0")
    assert "--enforce-eager" not in out and compat.CUDA_GRAPHS_FLAG not in out and "auto" not in out
    assert said.startswith("CUDA graphs") and "measured" in said
    out, said = compat.execution(qwen, "0.27.1")
    assert out[-1] == "--enforce-eager" and "no parity measurement for vLLM 0.27 × qwen3_vl" in said
    moe = ["--model", _model_dir(tmp_path, "qwen3_vl_moe"), compat.CUDA_GRAPHS_FLAG, "auto"]
    assert compat.execution(moe, "0.26.0")[0][-1] == "--enforce-eager", "an unmeasured family runs eager"


def test_cuda_graphs_on_and_off_are_obeyed_and_no_flag_changes_nothing(tmp_path):
    base = ["--model", _model_dir(tmp_path, "llama")]
    assert compat.execution([*base, compat.CUDA_GRAPHS_FLAG, "on"], "0.26.0")[0] == base
    assert compat.execution([*base, compat.CUDA_GRAPHS_FLAG, "off"], "0.26.0")[0] == [*base, "--enforce-eager"]
    assert compat.execution([*ARGV, "--enforce-eager"], "0.32.0") == ([*ARGV, "--enforce-eager"], "")
    with pytest.raises(SystemExit, match="expected auto, on or off"):
        compat.execution([*base, compat.CUDA_GRAPHS_FLAG, "maybe"], "0.26.0")


# Every flag supervise/engines.ts `engineArgs` can pass (CPU and GPU, replay, sleep mode, the extension).
TEMPO_RL_ARGV = [
    "--model",
    "m",
    "--served-model-name",
    "tempo-rl",
    "--host",
    "127.0.0.1",
    "--port",
    "8100",
    "--dtype",
    "bfloat16",
    "--max-model-len",
    "4096",
    "--seed",
    "0",
    "--enable-scale-out",
    "--logprobs-mode",
    "processed_logprobs",
    "--generation-config",
    "vllm",
    "--enforce-eager",
    "--block-size",
    "32",
    "--no-enable-chunked-prefill",
    "--distributed-executor-backend",
    "uni",
    "--kv-cache-memory-bytes",
    "268435456",
    "--disable-uvicorn-access-log",
    "--enable-return-routed-experts",
    "--worker-extension-cls",
    "tempo_engine.extension.TempoRlWorker",
    "--gpu-memory-utilization",
    "0.5",
    "--enable-sleep-mode",
]


def test_the_installed_vllm_parses_tempo_rls_command_line_once_adapted():
    pytest.importorskip("vllm")
    release = compat.installed()
    args = compat.parser(release).parse_args(compat.adapt(TEMPO_RL_ARGV, release))
    assert args.enforce_eager and args.logprobs_mode == "processed_logprobs" and args.enable_sleep_mode
    assert release.scale_out_flag == release.weight_labels, (
        f"a release between 0.26 and 0.32 tempo-rl has not met: {release}"
    )


class FakeServer:
    """An ASGI app answering generate with two tokens; `relabel` runs while a request is in flight."""

    def __init__(self):
        self.during = None

    async def __call__(self, scope, receive, send):
        if self.during is not None:
            await self.during()
        body = json.dumps({"choices": [{"index": 0, "token_ids": [5, 6]}]}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def call(app, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": json.dumps(body or {}).encode(), "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app({"type": "http", "method": method, "path": path, "headers": []}, receive, send))
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    start = sent[0]
    length = dict(start["headers"]).get(b"content-length")
    assert length is None or int(length) == len(payload), "content-length matches the body sent"
    return start["status"], json.loads(payload)


def test_labels_are_served_and_stamped_like_vllm_032s():
    server = FakeServer()
    app = labels.WeightLabels(server)
    assert call(app, "GET", "/weight_info") == (200, {"weight_version": "default"})
    assert call(app, "POST", "/update_weight_version", {"new_version": "3"}) == (
        200,
        {"success": True, "new_version": "3"},
    )
    status, doc = call(app, "POST", "/inference/v1/generate", {})
    assert status == 200 and doc["choices"][0]["weight_versions"] == [{"version": "3", "start": 0, "end": 2}]

    async def relabel():
        app.label = "4"

    server.during = relabel
    _, doc = call(app, "POST", "/inference/v1/generate", {})
    assert doc["choices"][0]["weight_versions"][0]["version"] == "mixed", (
        "a sync in the middle: tokens of unknown weights"
    )
    assert call(app, "POST", "/update_weight_version", {"new_version": 4})[0] == 400
    assert call(app, "POST", "/update_weight_version", {"nope": "4"})[0] == 400


def test_buckets_keep_the_order_respect_the_capacity_and_give_big_tensors_their_own():
    specs = [("a", "bfloat16", (10,)), ("b", "float32", (300,)), ("c", "bfloat16", (2000,)), ("d", "float32", (1,))]
    plan = weight_buckets.plan(specs, capacity=1500)
    assert [[e.name for e in b] for b in plan] == [["a", "b"], ["c"], ["d"]]
    assert all(e.offset % weight_buckets.ALIGN == 0 for b in plan for e in b)
    assert weight_buckets.size_of(plan[1]) == 4000, "a tensor over the capacity goes alone, whole"


def test_views_read_back_what_was_packed():
    specs = [("w", "bfloat16", (3, 4)), ("b", "float32", (5,))]
    [entries] = weight_buckets.plan(specs, capacity=1 << 20)
    buf = torch.zeros(weight_buckets.size_of(entries), dtype=torch.uint8)
    src = {"w": torch.randn(3, 4), "b": torch.randn(5)}
    for name, view in weight_buckets.views(buf, entries):
        view.copy_(src[name])
    got = dict(
        weight_buckets.views(
            buf, weight_buckets.entries_of(json.loads(json.dumps({"tensors": [e.to_json() for e in entries]})))
        )
    )
    assert torch.equal(got["w"], src["w"].to(torch.bfloat16)) and torch.equal(got["b"], src["b"])


def test_a_cuda_handle_travels_as_json_without_pickle():
    handle = [
        torch.Tensor,
        torch.Size([8]),
        (1,),
        0,
        torch.storage.TypedStorage,
        torch.uint8,
        0,
        b"\x00\xffhandle",
        8,
        0,
        False,
        b"ref",
        0,
        b"evt",
        True,
    ]
    encoded = json.loads(json.dumps([weight_buckets._encode(v) for v in handle]))
    decoded = [weight_buckets._decode(v) for v in encoded]
    assert decoded[0] is torch.Tensor and decoded[4] is torch.storage.TypedStorage and decoded[5] is torch.uint8
    assert decoded[7] == b"\x00\xffhandle" and decoded[1] == (8,) and decoded[14] is True
    with pytest.raises(weight_buckets.BucketError):
        weight_buckets._encode(object)


def test_a_bucket_from_another_host_or_gpu_is_refused_by_name():
    with pytest.raises(weight_buckets.BucketError, match="not on this host"):
        weight_buckets.open_bucket(
            {"kind": "shm", "path": "/dev/shm/none-such", "nbytes": 8, "tensors": []}, torch.device("cpu")
        )
    with pytest.raises(weight_buckets.BucketError, match="unknown bucket kind"):
        weight_buckets.open_bucket({"kind": "nfs", "nbytes": 8}, torch.device("cpu"))


def _text_model(tmp_path, kv_heads: int, head_dim: int, layers: int) -> str:
    text = {"num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": layers}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "text_config": text}))
    return str(tmp_path)


GIB = 2**30
ARGS = ["--model", "m"]


def _flags(model: str, **kw) -> deterministic.EngineFlags:
    return deterministic.EngineFlags(model=model, dtype="bfloat16", **kw)


def test_a_batch_invariant_engine_runs_flex_attention_with_a_cache_it_can_address(tmp_path):
    # the tiny Qwen3-VL: one KV head of 32, two layers — 8 GiB started on an H200, 16 GiB crashed
    tiny = _flags(_text_model(tmp_path, 1, 32, 2), gpu_memory_utilization=0.2)
    assert deterministic.kv_cache_bound(tiny) == 8 * GIB
    out, said = deterministic.batch_invariant(ARGS, tiny, lambda: 140 * GIB)
    assert out[out.index("--attention-backend") + 1] == "FLEX_ATTENTION"
    assert out[out.index("--kv-cache-memory-bytes") + 1] == str(8 * GIB), "28 GiB of cache would pass the bound"
    assert "bounded" in said
    out, _ = deterministic.batch_invariant(ARGS, tiny, lambda: 24 * GIB)
    assert "--kv-cache-memory-bytes" not in out, "a fifth of 24 GiB stays under the bound: vLLM sizes it"
    assert "--kv-cache-memory-bytes" in deterministic.batch_invariant(ARGS, tiny, lambda: None)[0], "no NVML: bounded"
    assert deterministic.is_batch_invariant({"VLLM_BATCH_INVARIANT": "1"}) and not deterministic.is_batch_invariant({})


def test_the_2b_shape_is_bounded_only_past_112_gib_and_stages_fp8_or_blocks_change_the_bound(tmp_path):
    shaped = _flags(_text_model(tmp_path, 8, 128, 28))
    assert deterministic.kv_cache_bound(shaped) == 112 * GIB
    assert "--kv-cache-memory-bytes" not in deterministic.batch_invariant(ARGS, shaped, lambda: 80 * GIB)[0]
    assert "--kv-cache-memory-bytes" in deterministic.batch_invariant(ARGS, shaped, lambda: 141 * GIB)[0], "an H200"
    model = shaped.model
    assert deterministic.kv_cache_bound(_flags(model, kv_cache_dtype="fp8")) == 56 * GIB
    assert deterministic.kv_cache_bound(_flags(model, pipeline_parallel_size=2)) == 56 * GIB, "14 layers a stage"
    assert deterministic.kv_cache_bound(_flags(model, pipeline_parallel_size=3)) == 36 * GIB, "the smallest stage"
    assert deterministic.kv_cache_bound(_flags(model, block_size=48)) < 112 * GIB, "the bound is whole blocks"


def test_a_users_cache_or_backend_is_honoured_or_refused_by_name(tmp_path):
    model = _text_model(tmp_path, 1, 32, 2)
    out, _ = deterministic.batch_invariant(ARGS, _flags(model, kv_cache_memory_bytes=2 * GIB), lambda: 140 * GIB)
    assert "--kv-cache-memory-bytes" not in out, "the user's 2 GiB stays as given"
    with pytest.raises(
        SystemExit, match=r"--kv-cache-memory-bytes 17179869184 .* more than FLEX_ATTENTION .* 8589934592"
    ):
        deterministic.batch_invariant(ARGS, _flags(model, kv_cache_memory_bytes=16 * GIB), lambda: 140 * GIB)
    out, said = deterministic.batch_invariant(ARGS, _flags(model, attention_backend="TRITON_ATTN"), lambda: 140 * GIB)
    assert out == ARGS and "TRITON_ATTN" in said and "certified: FLEX_ATTENTION" in said
    out, _ = deterministic.batch_invariant(ARGS, _flags(model, attention_backend="flex_attention"), lambda: 140 * GIB)
    assert "--attention-backend" not in out and "--kv-cache-memory-bytes" in out, "the user's FlexAttention, bounded"
    out, said = deterministic.batch_invariant(ARGS, _flags(str(tmp_path / "none")), lambda: 140 * GIB)
    assert "FLEX_ATTENTION" in out and "not bounded" in said
