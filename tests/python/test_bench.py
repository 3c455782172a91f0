import importlib.util
from pathlib import Path


def test_bench_runs_the_trainer_path_on_cpu():
    path = Path(__file__).resolve().parents[2] / "bench" / "trainer.py"
    spec = importlib.util.spec_from_file_location("bench_trainer", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--preset", "tiny", "--device", "cpu", "--seq-len", "64", "--prompt-len", "16", "--samples", "4",
                      "--group-size", "2", "--micro-batch-tokens", "128", "--steps", "1", "--warmup", "1"])
    assert out["tokens_per_second"] > 0 and out["micro_batches"] == 2 and out["grad_norm"] > 0
