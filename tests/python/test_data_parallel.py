"""Data parallelism (trainer/worker/data_parallel.py) on the CPU over gloo, world size 2 (torchrun in a subprocess):
a step equals one process's on the same batch, and checkpoints move between world sizes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.worker.data_parallel import plan_step
from trainer.step.token_logprobs import trainer_logprobs_key
from trainer.step.train_step import Trainer

HERE = Path(__file__).parent
WORKERS = HERE.parent.parent / "workers"
# Several micro-batches per rank and uneven counts between ranks; two updates per step. adam_eps 1:
# the update is lr·g/(|g|+1), smooth in the gradient, so equal weights mean equal gradients (with the
# usual eps, Adam moves every weight by about lr whatever its gradient's size, and a gradient of 1e-12
# against 0 — float summation order — shows as a difference of lr).
HYPER = {"micro_batch_tokens": 40, "ppo_mini_batches": 2, "loss_agg": "token_mean", "lr": 0.1, "adam_eps": 1.0}


def torchrun(
    tmp_path: Path, inputs: list[dict], *extra: str, world_size: int = 2, gpu: bool = False, env: dict | None = None
) -> list[dict]:
    """Runs dp_job.py on `world_size` ranks (CPU ones unless `gpu`), with `env` added to the
    environment; every process it starts is gone when it returns."""
    job = tmp_path / f"inputs-{inputs[0]['step']}.jsonl"
    job.write_text("".join(json.dumps(i) + "\n" for i in inputs))
    path = os.pathsep.join(p for p in (str(WORKERS), str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **(env or {})}
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world_size}",
        str(HERE / "dp_job.py"),
        str(job),
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            # torchrun starts its ranks in sessions of their own: they are found by parentage, and
            # killed before torchrun (whose SIGTERM would only ask them).
            for pid in [*descendants(proc.pid), proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.communicate()
    assert proc.returncode == 0, err[-6000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(ckpt.checkpoint_dir(run_dir, step) / "model.safetensors")


def assert_same_weights(a: dict, b: dict, atol=1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-5, msg=k)


@pytest.fixture
def steps(mixed_refs, make_input, tmp_path):
    def at(run: str, step: int) -> dict:
        return make_input(mixed_refs, step=step, run_dir=tmp_path / run, **HYPER)

    return at


def test_plan_balances_tokens_within_each_update_batch():
    inp = TrainStepInput.model_validate(
        {
            "run_id": "r",
            "step": 0,
            "run_dir": "x",
            "blob_store": "x",
            "model_path": "x",
            "samples": [{"ref": str(i), "reward": 0, "group_id": "g"} for i in range(6)],
            "hyper": {"ppo_mini_batches": 2},
        }
    )
    plan = plan_step(inp, [(10, 4), (50, 20), (20, 5), (5, 1), (30, 3), (30, 3)], world_size=2)
    assert plan.shares == [[[1], [0, 2]], [[3, 4], [5]]]
    assert plan.totals == [(3, 29), (3, 7)]
    assert plan.counts == {"train/n_samples": 6.0, "train/n_tokens": 145.0, "train/n_response_tokens": 36.0}


def test_a_step_at_world_size_2_equals_one_process(steps, tmp_path, mixed_refs, blob_dir):
    ref = Trainer(device="cpu").train_step(TrainStepInput.model_validate(steps("one", 0)))
    records = [blob_dir / "named" / trainer_logprobs_key(r["ref"][19:-5]) for r in mixed_refs]
    one = [json.loads(p.read_text())["logprobs"] for p in records]
    for p in records:
        p.unlink()
    out, ipc = torchrun(tmp_path, [steps("two", 0)], "--ipc")
    # each rank wrote its share's trainer logprobs: every sample's, as one process wrote them
    for p, lps in zip(records, one, strict=True):
        two = json.loads(p.read_text())["logprobs"]
        assert len(two) == len(lps) and max(abs(a - b) for a, b in zip(two, lps, strict=True)) <= 2e-4, p
    assert_sends_full_weights(ipc["ipc_digests"], tmp_path / "two")
    assert not out["already_committed"]
    for k in (
        "train/loss",
        "train/pg_loss",
        "train/grad_norm",
        "train/n_tokens",
        "train/n_samples",
        "train/n_response_tokens",
        "train/updates",
        "train/train_rollout_logprob_abs_diff",
    ):
        assert out["metrics"][k] == pytest.approx(ref.metrics[k], rel=1e-4, abs=1e-6), k
    assert_same_weights(weights(tmp_path / "two", 0), weights(tmp_path / "one", 0))
    # A sharded checkpoint, which is also the engines' model directory.
    assert (Path(out["checkpoint"]) / "dcp").is_dir() and not (Path(out["checkpoint"]) / "optimizer.pt").exists()
    assert (Path(out["checkpoint"]) / "config.json").is_file() and (
        Path(out["checkpoint"]) / "tokenizer.json"
    ).is_file()


def test_images_encoded_once_per_segment_at_world_size_2_equal_one_process(samples, make_input, tmp_path):
    """Images encoded ahead of the sharded forwards, a segment per micro-batch, uneven between the
    ranks (one shows more diagrams, more segments, than the other): every rank's collectives still
    line up, and the step is one process's that encodes in every micro-batch."""
    pictures = [((64, 48), (200, 30, 30)), ((40, 90), (20, 30, 220)), ((56, 56), (30, 200, 30))]
    refs = [
        samples.sample(
            f"r/0/{g}/{k}", reward=float(k % 2), group_id=f"r/0/{g}", seed=10 * g + k, pictures=[p], response_len=3 + k
        )
        for g, p in enumerate(pictures)
        for k in range(3)
    ]
    refs.append(samples.sample("r/0/3/0", reward=0.5, group_id="r/0/3", seed=99, response_len=6))
    # two updates: the old logprobs first, images encoded ahead without gradients too
    ref = Trainer(device="cpu").train_step(
        TrainStepInput.model_validate(make_input(refs, run_dir=tmp_path / "one", **HYPER))
    )
    out = torchrun(
        tmp_path,
        [make_input(refs, run_dir=tmp_path / "two", **HYPER)],
        "--segment-per-micro-batch",
        env={"TEMPO_RL_VISION_ONCE": "1"},
    )
    assert out[1]["segments"] >= 2, out[1]
    for k in ("train/loss", "train/grad_norm"):
        assert out[0]["metrics"][k] == pytest.approx(ref.metrics[k], rel=1e-4, abs=1e-6), k
    assert_same_weights(weights(tmp_path / "two", 0), weights(tmp_path / "one", 0))


def test_checkpoints_move_between_world_sizes(steps, tmp_path):
    one = Trainer(device="cpu")
    ref = [one.train_step(TrainStepInput.model_validate(steps("one", s))) for s in range(5)]
    # Steps 0-1 as one process wrote them; then 2 at world size 2 (loads optimizer.pt), 3 at world
    # size 2 after a restart (loads 2's sharded checkpoint), 4 at world size 1 (loads 3's). Each
    # update depends on Adam's moments: they came across, or the weights would differ.
    for s in (0, 1):
        shutil.copytree(ckpt.checkpoint_dir(tmp_path / "one", s), ckpt.checkpoint_dir(tmp_path / "mixed", s))
    out = torchrun(tmp_path, [steps("mixed", 2), steps("mixed", 3)], "--reload")
    assert [o["already_committed"] for o in out] == [False, False]
    assert out[1]["metrics"]["train/loss"] == pytest.approx(ref[3].metrics["train/loss"], rel=1e-4, abs=1e-6)
    Trainer(device="cpu").train_step(TrainStepInput.model_validate(steps("mixed", 4)))
    assert (ckpt.checkpoint_dir(tmp_path / "mixed", 4) / "optimizer.pt").is_file()
    for s in (2, 3, 4):
        assert_same_weights(weights(tmp_path / "mixed", s), weights(tmp_path / "one", s))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; CI has none")
@pytest.mark.parametrize("once", ["auto", "1"], ids=["images-in-each-forward", "images-encoded-ahead"])
def test_on_one_gpu_the_data_parallel_trainer_equals_the_single_process_one(steps, tmp_path, once):
    """The sharded path on a GPU (NCCL, FSDP2 over one rank, packed rows, compiled layers) in fp32
    compute, its images encoded in each forward or ahead (TEMPO_RL_VISION_ONCE): the same step as the
    plain Trainer on the same GPU (which encodes them ahead)."""
    ref = Trainer(device="cuda").train_step(TrainStepInput.model_validate(steps("one", 0)))
    [out] = torchrun(tmp_path, [steps("dp", 0)], world_size=1, gpu=True, env={"TEMPO_RL_VISION_ONCE": once})
    assert out["metrics"]["train/loss"] == pytest.approx(ref.metrics["train/loss"], rel=1e-3, abs=1e-5)
    assert_same_weights(weights(tmp_path / "dp", 0), weights(tmp_path / "one", 0), atol=1e-4)


def engine_digests(model) -> dict[str, list[float]]:
    from trainer.weights.ipc import engine_tensors

    return {n: [float(t.double().sum()), float(t.double().square().sum())] for n, t in engine_tensors(model)}


def assert_sends_full_weights(got: dict[str, list[float]], run_dir: Path) -> None:
    """The ipc transport from a sharded trainer: every rank gathers the full tensors from its shards and
    packs them; the engine's buckets hold exactly the weights one process would send (in the
    checkpoint's names, every tensor once)."""
    want = engine_digests(ckpt.load_checkpoint(ckpt.checkpoint_dir(run_dir, 0), "cpu", torch.float32).model)
    assert sorted(got) == sorted(want)
    for name, (s, sq) in want.items():
        assert got[name][0] == pytest.approx(s, rel=1e-5, abs=1e-5) and got[name][1] == pytest.approx(sq, rel=1e-5), (
            name
        )


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA IPC handles gathered over ranks); CI has none"
)
def test_on_one_gpu_the_ipc_transport_sends_the_full_weights_from_the_sharded_trainer(steps, tmp_path):
    out = torchrun(tmp_path, [steps("ipc", 0)], "--ipc", world_size=1, gpu=True)
    assert_sends_full_weights(next(o["ipc_digests"] for o in out if "ipc_digests" in o), tmp_path / "ipc")
