"""Two attempts of one step racing to commit it: an attempt that timed out but still runs
and its retry in another process (two Trainers: two locks, one run directory). The interleaving is
forced through os.rename and os.unlink: the old attempt waits, its checkpoint fully written, at the
rename that commits it; the retry then starts and the old attempt is let go at the worst moment."""

import os
import threading
from pathlib import Path

import pytest
import torch

from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.step.train_step import Trainer

WAIT_S = 120
OLD, RETRY = "old-attempt", "retry"


class Interleaving:
    """old_first: the old attempt's rename lands in the middle of the retry's first deletion (or just
    before the retry's own rename, if the retry deletes nothing), and the retry goes on only once the
    old attempt's step is done. retry_first: the retry commits while the old attempt waits."""

    def __init__(self, final: Path, order: str, monkeypatch):
        self.final, self.order = final, order
        self.old_at_rename, self.old_may_rename, self.old_done = threading.Event(), threading.Event(), threading.Event()
        real_rename, real_unlink = os.rename, os.unlink

        def rename(src, dst, *args, **kwargs):
            if Path(dst) == final and threading.current_thread().name == OLD:
                self.old_at_rename.set()
                assert self.old_may_rename.wait(WAIT_S), "the old attempt was never let go"
            elif Path(dst) == final and order == "old_first":
                self.let_old_attempt_commit()
            return real_rename(src, dst, *args, **kwargs)

        def unlink(path, *args, dir_fd=None, **kwargs):
            # dir_fd: shutil.rmtree's deletions, which follow the directory even once it is renamed.
            if dir_fd is not None and threading.current_thread().name == RETRY and order == "old_first":
                self.let_old_attempt_commit()
            return real_unlink(path, *args, dir_fd=dir_fd, **kwargs)

        monkeypatch.setattr(os, "rename", rename)
        monkeypatch.setattr(os, "unlink", unlink)

    def let_old_attempt_commit(self) -> None:
        if not self.old_may_rename.is_set():
            self.old_may_rename.set()
            assert self.old_done.wait(WAIT_S), "the old attempt did not finish"


def run_in_thread(name: str, fn, results: dict, done: threading.Event | None = None) -> threading.Thread:
    def target():
        try:
            results[name] = fn()
        except BaseException as err:  # reported by the test
            results[name] = err
        finally:
            if done is not None:
                done.set()

    thread = threading.Thread(target=target, name=name)
    thread.start()
    return thread


@pytest.mark.parametrize("order", ["old_first", "retry_first"])
def test_two_attempts_racing_on_one_step_commit_it_once(make_input, mixed_refs, monkeypatch, order):
    inp = TrainStepInput.model_validate(make_input(mixed_refs))
    final = ckpt.checkpoint_dir(inp.run_dir, 0)
    race = Interleaving(final, order, monkeypatch)
    trainers = {OLD: Trainer(device="cpu"), RETRY: Trainer(device="cpu")}
    results: dict = {}

    old = run_in_thread(OLD, lambda: trainers[OLD].train_step(inp), results, race.old_done)
    assert race.old_at_rename.wait(WAIT_S), "the old attempt never reached its commit"
    retry = run_in_thread(RETRY, lambda: trainers[RETRY].train_step(inp), results)
    retry.join(WAIT_S)
    race.old_may_rename.set()
    old.join(WAIT_S)
    monkeypatch.undo()

    errors = {k: v for k, v in results.items() if isinstance(v, BaseException)}
    assert not errors and len(results) == 2, errors
    winners = [name for name, out in results.items() if not out.already_committed]
    assert winners == [OLD if order == "old_first" else RETRY], "step 0 committed exactly once, by the first rename"
    winner, loser = results[winners[0]], results[OLD if winners[0] == RETRY else RETRY]
    assert loser.metrics == winner.metrics == ckpt.read_meta(final)["metrics"]

    # The winner's commit is whole and is the winner's model; the loser left nothing behind.
    for name in ("meta.json", "model.safetensors", "optimizer.pt", "rng.pt", "config.json"):
        assert (final / name).is_file(), name
    loaded = ckpt.load_checkpoint(final, "cpu", torch.float32)
    mine = trainers[winners[0]].state.model.state_dict()
    assert all(torch.equal(v, mine[k]) for k, v in loaded.model.state_dict().items())
    assert not list(final.parent.glob(".tmp-*"))


def test_only_temporaries_of_committed_steps_are_removed(make_input, mixed_refs):
    inp = TrainStepInput.model_validate({**make_input(mixed_refs), "samples": []})
    out = Trainer(device="cpu").train_step(inp)
    run_dir = Path(inp.run_dir)
    dead = ckpt.temporary_dir(run_dir, 0, "crashed")
    live = ckpt.temporary_dir(run_dir, 1, "still-writing")
    for d in (dead, live):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x")
    assert ckpt.remove_dead_temporaries(run_dir) == [dead]
    assert not dead.exists() and (live / "model.safetensors").is_file()
    ckpt.check_complete(out.checkpoint)


def test_a_committed_checkpoint_missing_a_file_is_refused(make_input, mixed_refs):
    inp = TrainStepInput.model_validate({**make_input(mixed_refs), "samples": []})
    out = Trainer(device="cpu").train_step(inp)
    (Path(out.checkpoint) / "model.safetensors").unlink()
    with pytest.raises(ckpt.CheckpointCorrupt, match="model.safetensors"):
        Trainer(device="cpu").ensure_state(inp.model_copy(update={"step": 1}))
