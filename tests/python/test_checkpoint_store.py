"""Checkpoints committed in an S3 store (workers/trainer/stores/checkpoints.py) and engines pulling weights
from it (tempo_engine/weights_from_store.py), against a real S3 server (S3Proxy, started by test_blobstore_s3's fixture).
"Another host" is a Trainer with its own, empty scratch run_dir: it shares only the store."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from test_blobstore_s3 import BUCKET, env, s3server  # noqa: F401, F811 (fixtures)
from trainer.checkpoint import atomic as ckpt
from tempo_common.blobs import open_blob_store
from tempo_common.commit_records import COMMIT
from trainer.stores.checkpoints import (
    StoredRun,
    engine_weights_location,
    is_location,
    parse_location,
    store_and_key,
)
from trainer.contract import TrainStepInput
from tempo_engine.weights_from_store import model_files, pull_weights
from trainer.step.train_step import Trainer


@pytest.fixture
def s3_samples(
    env,  # noqa: F811 (the fixture imported above)
    mixed_refs,
    blob_dir,
    monkeypatch,
    request,
):
    """The samples copied into a fresh S3 prefix (and only there); the AWS_* variables set for the trainer."""
    uri = f"s3://{BUCKET}/{request.node.name[:40]}"
    store = open_blob_store(uri, env=env)
    for path in sorted(p for p in blob_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(blob_dir).as_posix()
        if rel.startswith("cas/"):
            store.put_bytes(path.read_bytes(), path.suffix[1:])
        else:
            store.put_json(rel[len("named/") :], json.loads(path.read_text()))
    shutil.rmtree(blob_dir)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield uri, store
    store.close()


def _input(make_input, refs, uri, run_dir, step, **extra) -> TrainStepInput:
    payload = {**make_input(refs, step=step, run_dir=run_dir), "blob_store": uri, **extra}
    return TrainStepInput.model_validate(payload)


def _record(store, step, kind="checkpoints"):
    return store.get_json(store.named_ref(f"runs/r/{kind}/step-{step:06d}/{COMMIT}"))


def test_a_step_commits_in_the_store_and_another_host_resumes_from_it(s3_samples, mixed_refs, make_input, tmp_path):
    uri, store = s3_samples
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    out0 = Trainer().train_step(_input(make_input, mixed_refs, uri, host_a, 0))
    rec0 = _record(store, 0)
    assert rec0["attempt"] == ckpt.read_meta(out0.checkpoint)["attempt"] and rec0["full"]
    assert set(rec0["files"]) >= {"model.safetensors", "optimizer.pt", "rng.pt", "config.json"}
    assert all(store.exists(store.named_ref(f"{rec0['prefix']}/{n}")) for n in rec0["files"])

    # Host B, with nothing on its disk, trains step 1 from the store's step 0.
    out1 = Trainer().train_step(_input(make_input, mixed_refs, uri, host_b, 1))
    assert not out1.already_committed and Path(out1.checkpoint).is_relative_to(host_b)
    assert ckpt.is_committed(ckpt.checkpoint_dir(host_b, 0)), "step 0 was pulled into host B's scratch"
    # The same two steps in one process give the same weights (the digest recorded with step 1).
    same = Trainer()
    same.train_step(_input(make_input, mixed_refs, uri, tmp_path / "one", 0, run_id="one"))
    ref1 = same.train_step(_input(make_input, mixed_refs, uri, tmp_path / "one", 1, run_id="one"))
    assert ckpt.read_meta(ref1.checkpoint)["param_digest"] == _record(store, 1)["param_digest"]

    # Host A, asked for step 1 again (a retry), takes host B's commit instead of training it twice.
    again = Trainer().train_step(_input(make_input, mixed_refs, uri, host_a, 1))
    assert again.already_committed and again.metrics == out1.metrics
    assert ckpt.read_meta(ckpt.checkpoint_dir(host_a, 1))["attempt"] == _record(store, 1)["attempt"]


def test_concurrent_attempts_one_commit_and_the_loser_cleans_up(s3_samples, tmp_path):
    uri, store = s3_samples
    runs = [StoredRun(open_blob_store(uri), "r", tmp_path / f"h{i}") for i in range(4)]
    won: list[dict] = []

    def attempt(i: int) -> None:
        tmp = tmp_path / f"attempt-{i}"
        tmp.mkdir()
        (tmp / "model.safetensors").write_bytes(bytes([i]) * (1000 + i))
        won.append(
            runs[i].publish(
                "checkpoints", 7, tmp, {"attempt": f"a{i}", "step": 7, "full": True, "files": ckpt.manifest(tmp)}
            )
        )

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({w["attempt"] for w in won}) == 1, "every attempt sees the same winner"
    winner = won[0]
    keys = store.list_named("runs/r/checkpoints/step-000007")
    assert keys == sorted([f"{winner['prefix']}/model.safetensors", f"runs/r/checkpoints/step-000007/{COMMIT}"])
    # Any host materialises the winner's bytes, checked against the record.
    local = runs[3].materialize(7, _record(store, 7))
    assert (local / "model.safetensors").read_bytes() == bytes([int(winner["attempt"][1:])]) * winner["files"][
        "model.safetensors"
    ]


def test_a_corrupt_file_in_the_store_is_refused(s3_samples, tmp_path):
    uri, store = s3_samples
    tmp = tmp_path / "a"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(b"x" * 100)
    run = StoredRun(store, "r", tmp_path / "h")
    record = run.publish("checkpoints", 0, tmp, {"attempt": "t", "step": 0, "full": True, "files": ckpt.manifest(tmp)})
    (tmp / "model.safetensors").write_bytes(b"y" * 100)  # same size, other bytes
    store.put_file(f"{record['prefix']}/model.safetensors", tmp / "model.safetensors")
    with pytest.raises(ckpt.CheckpointCorrupt, match="does not match its commit record"):
        StoredRun(store, "r", tmp_path / "other").materialize(0, record)


def test_pruning_keeps_the_records_and_removes_the_files(s3_samples, mixed_refs, make_input, tmp_path):
    uri, store = s3_samples
    trainer = Trainer()
    for step in range(3):
        trainer.train_step(_input(make_input, mixed_refs, uri, tmp_path / "h", step, keep_checkpoints=1))
    assert [bool(_record(store, s).get("pruned")) for s in range(3)] == [True, True, False]
    assert store.list_named("runs/r/checkpoints/step-000000") == [f"runs/r/checkpoints/step-000000/{COMMIT}"]
    # A fresh host asked for step 1 again gets its commit (exactly once) but no weights.
    with pytest.raises(ckpt.CheckpointPruned):
        Trainer().train_step(_input(make_input, mixed_refs, uri, tmp_path / "fresh", 1, keep_checkpoints=1))


def test_engines_pull_a_full_step_and_a_light_steps_exported_weights(s3_samples, mixed_refs, make_input, tmp_path):
    uri, store = s3_samples
    trainer = Trainer()
    for step in range(2):  # checkpoint_interval 2: step 0 light, step 1 full
        trainer.train_step(_input(make_input, mixed_refs, uri, tmp_path / "h", step, checkpoint_interval=2))
    assert not _record(store, 0)["full"] and _record(store, 1)["full"]
    fresh = Trainer()
    run = fresh.stored_run(uri, "r", tmp_path / "fresh")
    full_loc = engine_weights_location(fresh, run, 1, progress=_Quiet())
    assert is_location(full_loc) and parse_location(full_loc)[1:] == ("r", "checkpoints", 1)
    light_loc = engine_weights_location(fresh, run, 0, progress=_Quiet())  # replayed on the fresh host
    assert parse_location(light_loc)[1:] == ("r", "weights", 0)
    assert "optimizer.pt" not in _record(store, 0, "weights")["files"]

    got = pull_weights(*store_and_key(full_loc), root=tmp_path / "engine")
    assert sorted(p.name for p in got.iterdir()) == sorted(model_files(_record(store, 1)))
    assert "optimizer.pt" not in {p.name for p in got.iterdir()}
    assert pull_weights(*store_and_key(full_loc), root=tmp_path / "engine") == got, "pulled once"
    light = pull_weights(*store_and_key(light_loc), root=tmp_path / "engine")
    assert (light / "model.safetensors").stat().st_size == _record(store, 0, "weights")["files"]["model.safetensors"]


class _Quiet:
    def heartbeat(self, details: dict) -> None:
        pass

    def is_cancelled(self) -> bool:
        return False
