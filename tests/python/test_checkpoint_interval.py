"""run.checkpoint_interval: light steps commit their record only; a trainer that restarts between full
checkpoints replays the recorded steps to the same weights; engines get a light step's weights on
demand; retention keeps the newest full checkpoints and every M-th."""

import torch
from safetensors.torch import load_file

from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.step.train_step import Trainer


def step_input(make_input, refs, step, run_dir, **extra) -> TrainStepInput:
    doc = make_input(refs, step=step, run_dir=run_dir, ppo_mini_batches=2)
    return TrainStepInput.model_validate({**doc, "checkpoint_interval": 3, **extra})


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_light_steps_replay_to_the_weights_of_an_uninterrupted_run(make_input, mixed_refs, tmp_path):
    # Uninterrupted: steps 0..4 in one process (full checkpoint at step 2 only).
    straight = Trainer(device="cpu")
    for step in range(5):
        straight.train_step(step_input(make_input, mixed_refs, step, tmp_path / "a"))
    dirs = [ckpt.checkpoint_dir(tmp_path / "a", s) for s in range(5)]
    assert [ckpt.is_full(d) for d in dirs] == [False, False, True, False, False]
    assert sorted(p.name for p in dirs[3].iterdir()) == ["meta.json"], "a light step writes its record only"
    record = ckpt.read_meta(dirs[3])
    assert record["replay"]["samples"] == mixed_refs and record["sample_refs"] == [r["ref"] for r in mixed_refs]

    # Interrupted: the same steps, the trainer process dying after step 0 and again after step 4.
    run_b = tmp_path / "b"
    Trainer(device="cpu").train_step(step_input(make_input, mixed_refs, 0, run_b))
    b = Trainer(device="cpu")
    out1 = b.train_step(step_input(make_input, mixed_refs, 1, run_b))
    assert out1.metrics["train/replayed_steps"] == 1, "step 1 replayed step 0 from the base model"
    for step in range(2, 5):
        b.train_step(step_input(make_input, mixed_refs, step, run_b))
    c = Trainer(device="cpu")
    out5 = c.train_step(step_input(make_input, mixed_refs, 5, run_b))
    assert out5.metrics["train/replayed_steps"] == 2 and out5.metrics["train/replay_mismatches"] == 0, out5.metrics
    straight.train_step(step_input(make_input, mixed_refs, 5, tmp_path / "a"))
    wa, wc = weights(straight.state.model), weights(c.state.model)
    assert all(torch.equal(wa[k], wc[k]) for k in wa), "replayed weights differ from the uninterrupted run's"
    assert ckpt.optimizer_steps(c.state.optimizer) == ckpt.optimizer_steps(straight.state.optimizer) == 12


def test_an_engine_gets_a_light_steps_weights_even_after_a_restart(make_input, mixed_refs, tmp_path):
    run = tmp_path / "run"
    t = Trainer(device="cpu")
    for step in range(4):
        out = t.train_step(step_input(make_input, mixed_refs, step, run))
    expected = weights(t.state.model)
    assert not ckpt.is_full(out.checkpoint)
    fresh = Trainer(device="cpu")  # a restarted trainer: step 3's weights are nowhere on disk
    path = fresh.engine_weights(out.checkpoint)
    assert path == str(ckpt.weights_dir(run, 3))
    saved = load_file(f"{path}/model.safetensors")
    state = {k: v for k, v in expected.items() if k in saved}
    assert state and all(torch.equal(saved[k], state[k]) for k in state)
    assert fresh.state.step == 3, "the rebuilt state is kept for the next step"
    assert t.engine_weights(ckpt.checkpoint_dir(run, 2).as_posix()) == ckpt.checkpoint_dir(run, 2).as_posix(), (
        "a full checkpoint is its own model directory"
    )
    t.train_step(step_input(make_input, mixed_refs, 4, run))
    t.engine_weights(str(ckpt.checkpoint_dir(run, 4)))
    assert [p.name for p in (run / "weights").iterdir()] == ["step-000004"], "only the newest export is kept"


def test_the_last_step_is_full_and_retention_keeps_every_mth(make_input, mixed_refs, tmp_path):
    run = tmp_path / "run"
    t = Trainer(device="cpu")
    for step in range(8):
        t.train_step(
            step_input(
                make_input,
                mixed_refs,
                step,
                run,
                keep_checkpoints=2,
                keep_checkpoint_every=6,
                full_checkpoint=step == 7,
            )
        )
    full = [s for s in range(8) if ckpt.is_full(ckpt.checkpoint_dir(run, s))]
    assert full == [2, 5, 7]
    kept = [s for s in full if (ckpt.checkpoint_dir(run, s) / "optimizer.pt").exists()]
    assert kept == [5, 7], "the newest two full checkpoints keep their weights"
    t2 = Trainer(device="cpu")
    for step in range(12):
        t2.train_step(
            step_input(make_input, mixed_refs, step, tmp_path / "every", keep_checkpoints=2, keep_checkpoint_every=6)
        )
    kept = [s for s in range(12) if (ckpt.checkpoint_dir(tmp_path / "every", s) / "optimizer.pt").exists()]
    assert kept == [5, 8, 11], "step 5 ((5 + 1) % 6 == 0) is kept beside the newest two"


def test_a_run_started_from_another_runs_checkpoint_commits_its_own(make_input, mixed_refs, tmp_path):
    # A full checkpoint is a model directory with the commit record (meta.json) beside the weights; a run
    # whose model.path is one must not take that record over into its own checkpoints.
    first = Trainer(device="cpu")
    doc = make_input(mixed_refs, step=0, run_dir=tmp_path / "a")
    full = first.train_step(TrainStepInput.model_validate({**doc, "checkpoint_interval": 1}))
    assert ckpt.is_full(full.checkpoint)
    second = Trainer(device="cpu")
    doc = {**make_input(mixed_refs, step=0, run_dir=tmp_path / "b"), "model_path": full.checkpoint}
    out = second.train_step(TrainStepInput.model_validate({**doc, "checkpoint_interval": 1}))
    ckpt.check_complete(out.checkpoint)
    assert (
        ckpt.read_meta(out.checkpoint)["step"] == 0
        and ckpt.read_meta(out.checkpoint)["base_model_path"] == full.checkpoint
    )
