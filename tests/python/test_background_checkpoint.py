"""Full checkpoints written in the background (checkpoint/background.py, step/commit.py): the step
commits as a light step at once and becomes full when its files land. Exactly once holds whatever
happens before that: a crash (a fresh trainer) replays the step from the previous full checkpoint, a
second attempt returns the committed record, a failed write leaves the step light — and the files, once
there, are those a checkpoint written inside the step holds."""

import threading
from pathlib import Path

import pytest
import torch

from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.step import commit
from trainer.step.train_step import Trainer


def step_input(make_input, refs, step, run_dir, interval=3) -> TrainStepInput:
    doc = make_input(refs, step=step, run_dir=run_dir)
    return TrainStepInput.model_validate({**doc, "checkpoint_interval": interval})


def state_of(path) -> tuple[dict, dict]:
    loaded = ckpt.load_checkpoint(path, "cpu", torch.float32)
    return loaded.model.state_dict(), loaded.optimizer_state


def assert_same_state(a, b) -> None:
    (wa, oa), (wb, ob) = a, b
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), "weights differ"
    assert oa["param_groups"] == ob["param_groups"]
    for i, moments in oa["state"].items():
        assert all(torch.equal(v, ob["state"][i][k]) for k, v in moments.items()), f"optimizer state {i} differs"


class HeldWrites:
    """Background writes held back until released (the window a crash or a retry falls into)."""

    def __init__(self, monkeypatch, fail: bool = False):
        self.release, self.started = threading.Event(), threading.Event()
        real = commit.write_snapshot

        def held(tmp, *args):
            self.started.set()
            assert self.release.wait(120), "never released"
            if fail:
                raise OSError("disk full")
            real(tmp, *args)

        monkeypatch.setattr(commit, "write_snapshot", held)


def test_a_background_checkpoint_holds_what_one_written_in_the_step_holds(make_input, mixed_refs, tmp_path):
    sync = Trainer(device="cpu", background_checkpoints=False)
    out_sync = sync.train_step(step_input(make_input, mixed_refs, 0, tmp_path / "sync", interval=1))
    background = Trainer(device="cpu", background_checkpoints=True)
    out_bg = background.train_step(step_input(make_input, mixed_refs, 0, tmp_path / "bg", interval=1))
    assert "perf/checkpoint_snapshot_seconds" in out_bg.metrics and out_bg.metrics["perf/checkpoint_host_gib"] > 0
    assert out_bg.metrics["train/loss"] == out_sync.metrics["train/loss"]
    # interval 1: step 1 is full too, waits for step 0's write and reports how long it took
    out1 = background.train_step(step_input(make_input, mixed_refs, 1, tmp_path / "bg", interval=1))
    assert "perf/checkpoint_wait_seconds" in out1.metrics and "perf/checkpoint_background_seconds" in out1.metrics
    background.background.wait()
    path, written = ckpt.checkpoint_dir(tmp_path / "bg", 0), ckpt.checkpoint_dir(tmp_path / "sync", 0)
    meta = ckpt.read_meta(path)
    assert (
        meta["full"] and "full_pending" not in meta and meta["files"].keys() == ckpt.read_meta(written)["files"].keys()
    )
    assert_same_state(state_of(path), state_of(written))
    assert ckpt.is_full(ckpt.checkpoint_dir(tmp_path / "bg", 1))
    assert not list((tmp_path / "bg" / "checkpoints").glob(".*")), "no temporary directory left"


def test_a_crash_or_a_retry_before_the_write_lands_keeps_exactly_once(make_input, mixed_refs, tmp_path, monkeypatch):
    run = tmp_path / "run"
    held = HeldWrites(monkeypatch)
    a = Trainer(device="cpu", background_checkpoints=True)
    outs = [a.train_step(step_input(make_input, mixed_refs, step, run)) for step in range(3)]
    assert held.started.wait(60)
    step2 = ckpt.checkpoint_dir(run, 2)
    assert ckpt.is_committed(step2) and not ckpt.is_full(step2) and ckpt.read_meta(step2)["full_pending"]

    # A second attempt of step 2 (a retry in another process): the record that won, nothing trained.
    retry = Trainer(device="cpu", background_checkpoints=False).train_step(step_input(make_input, mixed_refs, 2, run))
    assert retry.already_committed and retry.metrics == outs[2].metrics
    # The trainer dies before the write lands: a fresh one rebuilds step 2 from the base model by
    # replaying steps 0-2, each to the weights its record's digest names.
    fresh = Trainer(device="cpu", background_checkpoints=False)
    out3 = fresh.train_step(step_input(make_input, mixed_refs, 3, run))
    assert out3.metrics["train/replayed_steps"] == 3 and out3.metrics["train/replay_mismatches"] == 0, out3.metrics

    held.release.set()  # the first trainer's write lands after all (it was only slow)
    a.background.wait()
    assert ckpt.is_full(step2)
    mine = (a.state.model.state_dict(), a.state.optimizer.state_dict())  # a is still at step 2
    assert_same_state(state_of(step2), mine)
    later = Trainer(device="cpu", background_checkpoints=False)
    out4 = later.train_step(step_input(make_input, mixed_refs, 4, run))
    assert out4.metrics["train/replayed_steps"] == 1, "now step 2 is full: only step 3 is replayed"


def test_a_failed_write_leaves_the_step_light_and_says_so(make_input, mixed_refs, tmp_path, monkeypatch):
    held = HeldWrites(monkeypatch, fail=True)
    held.release.set()
    run = tmp_path / "run"
    t = Trainer(device="cpu", background_checkpoints=True)
    t.train_step(step_input(make_input, mixed_refs, 0, run, interval=1))
    t.background.wait()
    assert not ckpt.is_full(ckpt.checkpoint_dir(run, 0)) and not list((run / "checkpoints").glob(".full-*"))
    out = t.train_step(step_input(make_input, mixed_refs, 1, run, interval=1))
    assert out.metrics["perf/checkpoint_background_failures"] == 1
    t.background.wait()
    assert not ckpt.is_full(ckpt.checkpoint_dir(run, 1)), "a light step, replayed after a crash (as above)"


def test_an_upgrade_cut_before_its_record_leaves_the_step_light(make_input, mixed_refs, tmp_path, monkeypatch):
    inp = step_input(make_input, mixed_refs, 0, tmp_path / "run")
    out = Trainer(device="cpu", background_checkpoints=False).train_step(inp)  # step 0: light
    attempt = ckpt.read_meta(out.checkpoint)["attempt"]

    def write(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "optimizer.pt").write_bytes(b"x" * 10)

    assert ckpt.upgrade_to_full(inp.run_dir, 0, "another-attempt", write) is None, "not this attempt's step"

    def killed(*args):
        raise OSError("killed")

    with monkeypatch.context() as m:  # the process dies between the files' move and the record's rename
        m.setattr(ckpt.os, "replace", killed)
        with pytest.raises(OSError):
            ckpt.upgrade_to_full(inp.run_dir, 0, attempt, write)
    assert not ckpt.is_full(out.checkpoint)
    ckpt.check_complete(out.checkpoint)  # the stray file is not in the record
    assert (
        Trainer(device="cpu")
        .train_step(step_input(make_input, mixed_refs, 1, tmp_path / "run"))
        .metrics["train/replayed_steps"]
        == 1
    )


def test_host_buffers_carve_pinned_slabs_and_keep_them(monkeypatch):
    from trainer.checkpoint import background

    made = []

    def empty(shape, dtype, pin_memory=False):  # pinned memory needs CUDA: plain memory, same layout
        made.append((shape, pin_memory))
        return torch.zeros(shape, dtype=dtype)

    monkeypatch.setattr(background, "SLAB_BYTES", 1024)
    monkeypatch.setattr(background.torch, "empty", empty)
    buffers = background.HostBuffers(pinned=True)
    tensors = {
        "a": torch.arange(100, dtype=torch.float32),  # 400 bytes
        "b": torch.arange(60, dtype=torch.int64).reshape(6, 10),  # 480 bytes: the same slab
        "c": torch.tensor(3.5),  # a 0-dim step count
        "big": torch.ones(300, dtype=torch.float32),  # 1200 bytes: more than a slab, its own
    }
    first = {k: buffers.copy(k, t) for k, t in tensors.items()}
    assert all(torch.equal(first[k], t) and first[k].dtype == t.dtype for k, t in tensors.items())
    assert made == [(1024, True), (1200, True)] and buffers.nbytes == 2224, "a, b and c share one slab"
    tensors["a"] += 1
    again = buffers.copy("a", tensors["a"])
    assert again.data_ptr() == first["a"].data_ptr() and torch.equal(again, tensors["a"]) and len(made) == 2


def test_the_tied_head_is_written_though_save_pretrained_consumes_the_state_dict(tiny_model, tmp_path, monkeypatch):
    """A snapshot is written through save_pretrained(state_dict=…), which in transformers 5 empties the
    dict it is given as it writes (seen on the 2B shape: the background write failed with a KeyError on
    the tied embedding); the tied LM head is read from it afterwards."""
    from safetensors.torch import load_file
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(tiny_model)
    real = type(model).save_pretrained

    def consuming(self, out, **kwargs):
        real(self, out, **kwargs)
        if kwargs.get("state_dict") is not None:
            kwargs["state_dict"].clear()

    monkeypatch.setattr(type(model), "save_pretrained", consuming)
    ckpt.write_model_dir(tmp_path / "out", model, tiny_model, dict(model.state_dict()))
    head = load_file(tmp_path / "out" / "lm_head.safetensors")["lm_head.weight"]
    assert torch.equal(head, model.get_output_embeddings().weight.detach())
