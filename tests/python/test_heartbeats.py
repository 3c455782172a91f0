"""The trainer's activities heartbeat from a side thread through their long phases: a
checkpoint load, the samples' load, the save, an engine's reload, the wait for the trainer's lock.
Each phase is made long here (a sleep) and the heartbeats that reach the activity context while it
runs are counted; the SDK's heartbeat function is faked by ActivityEnvironment.on_heartbeat."""

import threading
import time

import pytest
from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment

from trainer.checkpoint import atomic as ckpt
from trainer.weights import sync as weight_sync
from trainer.worker.activities import TrainerActivities
from trainer.contract import TrainStepInput
from trainer.step.heartbeat import HEARTBEAT_INTERVAL_S
from trainer.step.train_step import Trainer

LONG_S = 3.5 * HEARTBEAT_INTERVAL_S
MIN_BEATS = 2  # of the ~3 a long phase should see; fewer only on a machine too busy to tell


class Beats:
    def __init__(self):
        self.log: list[tuple[float, dict]] = []

    def __call__(self, *details):
        self.log.append((time.monotonic(), details[0] if details else {}))

    def during(self, window: dict) -> list[dict]:
        return [d for t, d in self.log if window["start"] <= t <= window["end"]]


def environment() -> tuple[ActivityEnvironment, Beats]:
    env, beats = ActivityEnvironment(), Beats()
    env.on_heartbeat = beats
    return env, beats


def make_long(monkeypatch, owner, name: str) -> dict:
    """Makes owner.name sleep LONG_S first; returns the window ({start, end}) it slept in."""
    real, window = getattr(owner, name), {}

    def long(*args, **kwargs):
        window["start"] = time.monotonic()
        time.sleep(LONG_S)
        window["end"] = time.monotonic()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, long)
    return window


@pytest.mark.parametrize(
    "owner, name, phase",
    [
        (ckpt, "load_checkpoint", "loading_state"),
        (Trainer, "load_samples", "loading_samples"),
        (ckpt, "save_checkpoint", "committing"),
    ],
)
def test_a_long_train_step_phase_heartbeats(make_input, mixed_refs, monkeypatch, owner, name, phase):
    step0 = TrainStepInput.model_validate({**make_input(mixed_refs), "samples": []})
    Trainer(device="cpu").train_step(step0)  # for step 1 to load
    window = make_long(monkeypatch, owner, name)
    env, beats = environment()
    out = env.run(TrainerActivities(Trainer(device="cpu")).train_step, make_input(mixed_refs, step=1))
    assert out["already_committed"] is False
    inside = beats.during(window)
    assert len(inside) >= MIN_BEATS and all(d.get("phase") == phase for d in inside), inside


def test_a_step_waiting_for_the_trainer_heartbeats_and_stops_waiting_when_cancelled(make_input, mixed_refs):
    trainer = Trainer(device="cpu")
    env, beats = environment()
    result: dict = {}

    def run():
        try:
            result["out"] = env.run(TrainerActivities(trainer).train_step, make_input(mixed_refs))
        except BaseException as err:
            result["out"] = err

    with trainer.lock:  # another attempt is training
        waiting = threading.Thread(target=run)
        waiting.start()
        window = {"start": time.monotonic()}
        time.sleep(LONG_S)
        window["end"] = time.monotonic()
        env.cancel()
        waiting.join(10 * HEARTBEAT_INTERVAL_S)
        stopped = not waiting.is_alive()
    waiting.join()
    inside = beats.during(window)
    assert len(inside) >= MIN_BEATS and all(d.get("phase") == "waiting_for_trainer" for d in inside), inside
    assert stopped and isinstance(result["out"], CancelledError), result


def test_a_long_engine_reload_heartbeats(monkeypatch, tmp_path):
    window = {}

    def engine(self, method, path, **kwargs):
        if path == "/collective_rpc":
            window["start"] = time.monotonic()
            time.sleep(LONG_S)
            window["end"] = time.monotonic()
        return {"weight_version": "3"} if path == "/weight_info" else None

    monkeypatch.setattr(weight_sync.EngineClient, "_call", engine)
    env, beats = environment()
    out = env.run(
        TrainerActivities(Trainer(device="cpu")).sync_weights,
        {
            "run_id": "r",
            "weight_version": 3,
            "checkpoint": str(tmp_path),
            "engines": ["http://engine:1"],
            "pause_mode": "wait",
        },
    )
    assert out["engines"][0]["ok"]
    inside = beats.during(window)
    assert len(inside) >= MIN_BEATS and all(d.get("phase") == "reloading" for d in inside), inside
