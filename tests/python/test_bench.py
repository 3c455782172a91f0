import importlib.util
import json
from pathlib import Path


def load_bench():
    path = Path(__file__).resolve().parents[2] / "bench" / "trainer.py"
    spec = importlib.util.spec_from_file_location("bench_trainer", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bench_runs_the_trainer_path_and_the_plain_step_on_cpu():
    out = load_bench().main(
        [
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--seq-len",
            "64",
            "--prompt-len",
            "16",
            "--samples",
            "4",
            "--group-size",
            "2",
            "--micro-batch-tokens",
            "128",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--precision",
            "amp",
            "--plain",
        ]
    )
    ours, plain = out["tempo_rl"], out["plain"]
    assert ours["tokens_per_second"] > 0 and ours["micro_batches"] == 2 and ours["grad_norm"] > 0
    assert plain["micro_batches"] == 2 and plain["grad_norm"] > 0 and out["ratio_tokens_per_second"] > 0
    # fp32 master weights: nearly every weight moves at lr 1e-6 (bf16-held weights would not)
    assert ours["weights_moved"] > 0.5, ours


def test_bench_variable_batch_reports_its_padding():
    out = load_bench().main(
        [
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--samples",
            "3",
            "--group-size",
            "3",
            "--micro-batch-tokens",
            "4096",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--variable",
        ]
    )
    ours = out["tempo_rl"]
    assert 0 < ours["padding_efficiency"] <= 1 and ours["tokens_per_step"] > 3 * 350, ours


def test_routing_replay_bench_runs_on_cpu(tmp_path):
    path = Path(__file__).resolve().parents[2] / "bench" / "moe-routing-replay.py"
    spec = importlib.util.spec_from_file_location("bench_r3", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from trainer.generators.tiny_moe_model import build_tiny_moe_model

    model = build_tiny_moe_model(tmp_path / "moe", seed=0)
    out = bench.main(
        [
            "--model",
            str(model),
            "--prompts",
            "2",
            "--gen",
            "4",
            "--steps",
            "1",
            "--drift",
            "router",
            "--noise",
            "0.5",
            "--json",
        ]
    )
    first, last = out["steps"]
    assert first["routes_flipped"] == 0 and first["abs_diff_no_replay"] < 1e-5
    assert last["abs_diff_replay"] <= last["abs_diff_no_replay"], last


def test_bench_runs_the_products_steps_on_a_vlm(tiny_model, tmp_path):
    out_file = tmp_path / "out.json"
    out = load_bench().main(
        [
            "--model",
            str(tiny_model),
            "--device",
            "cpu",
            "--samples",
            "4",
            "--group-size",
            "2",
            "--steps",
            "2",
            "--prompt-tokens",
            "60-120",
            "--response-mu",
            "3.5",
            "--max-response",
            "80",
            "--micro-batch-tokens",
            "300",
            "--checkpoint",
            "background",
            "--checkpoint-interval",
            "1",
            "--last-step-full",
            "--out",
            str(out_file),
        ]
    )
    first, last = out["steps"]
    assert first["checkpoint"]["kind"] == "full-background" and last["checkpoint"]["kind"] == "full-sync", out
    assert "snapshot_seconds" in first["checkpoint"] and "background_seconds" in last["checkpoint"]
    for step in (first, last):
        assert step["tokens"] > 4 * 60 and step["image_patches"] > 0 and step["micro_batches"] >= 2
        assert {"decoder_fwd", "decoder_bwd", "lm_head_fwd", "vision_fwd", "optimizer"} <= set(step["phases_ms"])
        assert all("->" not in name for name in step["phases_ms"]), step["phases_ms"]
        assert step["train_s"] > 0 and step["tokens_per_s"] > 0
    assert json.loads(out_file.read_text())["steps"] == out["steps"]


def test_the_gpu_trainer_script_runs_dry_on_cpu(tiny_model, tmp_path):
    import os
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "bench" / "gpu-trainer.sh"
    env = {**os.environ, "DRY": "1", "PYTHON": sys.executable, "TEMPO_RL_TINY_MODEL": str(tiny_model)}
    done = subprocess.run(
        ["bash", str(script), str(tmp_path), "base64", "parity"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "base64: ok" in done.stderr and "parity: ok" in done.stderr, done.stderr[-2000:]
    runs = json.loads((tmp_path / "trainer-base64.json").read_text())
    assert [s["step"] for s in runs["steps"]] == [0, 1] and json.loads((tmp_path / "parity-memory.json").read_text())
    assert "base64" in (tmp_path / "summary.txt").read_text()
