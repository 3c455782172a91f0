"""A non-finite step is never applied: the weights stay at step N−1's, step N is committed once with
train/nonfinite_step 1, and its metrics are JSON numbers only."""

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

import trainer.step.train_step as train_step_module
from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.step.train_step import Trainer


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def strict_json(path: Path) -> dict:
    def refuse(name):
        raise ValueError(f"{name} in {path}")

    return json.loads(path.read_text(), parse_constant=refuse)


def nan_advantage(monkeypatch):
    real = train_step_module.group_advantages

    def poisoned(*args, **kwargs):
        adv = real(*args, **kwargs)
        adv[0] = float("nan")
        return adv

    monkeypatch.setattr(train_step_module, "group_advantages", poisoned)


def test_a_nan_loss_leaves_the_weights_of_step_n_minus_1_and_commits_step_n(make_input, mixed_refs, monkeypatch):
    trainer = Trainer(device="cpu")
    first = trainer.train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=0)))
    assert first.metrics["train/nonfinite_step"] == 0.0 and not first.already_committed
    weights = params(trainer.state.model)
    opt = trainer.state.optimizer.state_dict()

    nan_advantage(monkeypatch)
    inp = TrainStepInput.model_validate(make_input(mixed_refs, step=1))
    out = trainer.train_step(inp)
    assert not out.already_committed and out.weight_version == 2 and trainer.state.step == 1
    assert out.metrics["train/nonfinite_step"] == 1.0
    assert all(math.isfinite(v) for v in out.metrics.values()), out.metrics
    assert "train/loss" not in out.metrics and "train/grad_norm" not in out.metrics
    assert out.metrics["train/n_samples"] == 4

    after = params(trainer.state.model)
    assert all(torch.equal(weights[k], after[k]) for k in weights), "the model is exactly step 0's"
    opt_after = trainer.state.optimizer.state_dict()
    assert opt_after["state"].keys() == opt["state"].keys()
    for i, s in opt["state"].items():
        for k, v in s.items():
            assert torch.equal(opt_after["state"][i][k], v), (i, k)
    assert all(p.grad is None for p in trainer.state.model.parameters())

    # checkpoint 1 = checkpoint 0's weights; meta.json is strict JSON and records what happened
    w0 = load_file(Path(first.checkpoint) / "model.safetensors")
    w1 = load_file(Path(out.checkpoint) / "model.safetensors")
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    meta = strict_json(Path(out.checkpoint) / "meta.json")
    assert meta["metrics"] == out.metrics and meta["update_applied"] is False and meta["optimizer_steps"] == 1
    assert meta["sample_refs"] == [r["ref"] for r in mixed_refs]
    assert "train/loss" in meta["nonfinite_metrics"] and "train/grad_norm" in meta["nonfinite_metrics"]
    assert strict_json(Path(first.checkpoint) / "meta.json")["update_applied"] is True

    # exactly once: the same step again trains nothing and answers the recorded metrics
    again = trainer.train_step(inp)
    assert again.already_committed and again.metrics == out.metrics
    assert Trainer(device="cpu").train_step(inp).already_committed

    # and the run goes on from the unchanged weights
    monkeypatch.undo()
    third = trainer.train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=2)))
    assert not third.already_committed and third.metrics["train/nonfinite_step"] == 0.0
    assert math.isfinite(third.metrics["train/loss"]) and third.metrics["train/grad_norm"] > 0
    assert any(not torch.equal(weights[k], v) for k, v in params(trainer.state.model).items())


def test_a_commit_won_by_another_attempt_is_reported_as_theirs(make_input, mixed_refs, monkeypatch):
    """Two attempts race on step N: the one whose rename lost returns the winner's record and drops its
    in-memory state (it trained, but its weights are not the committed ones)."""
    real = ckpt.save_checkpoint

    def other_attempt_first(run_dir, step, model, optimizer, **kw):
        theirs = {**kw, "metrics": {"train/loss": 0.5}, "extra": {**kw["extra"], "attempt": "theirs"}}
        real(run_dir, step, model, optimizer, **theirs)
        return real(run_dir, step, model, optimizer, **kw)

    monkeypatch.setattr(ckpt, "save_checkpoint", other_attempt_first)
    trainer = Trainer(device="cpu")
    out = trainer.train_step(TrainStepInput.model_validate(make_input(mixed_refs)))
    assert out.already_committed and out.metrics["train/loss"] == 0.5 and trainer.state is None
    assert set(out.metrics) == {"train/loss", "perf/checkpoint_seconds"}, "theirs, as recorded"
