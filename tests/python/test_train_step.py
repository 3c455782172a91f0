"""train_step on the tiny Qwen3-VL: exactly once, checkpoints, micro-batching, vision inputs."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.model.policy import SampleInvalid
from trainer.step.train_step import NoProgress, StepCancelled, Trainer, accumulate_gradients


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def n_changed(a: dict, b: dict) -> int:
    return sum(not torch.equal(a[k], b[k]) for k in a)


def test_same_step_twice_changes_the_weights_once(make_input, mixed_refs):
    trainer = Trainer(device="cpu")
    inp = TrainStepInput.model_validate(make_input(mixed_refs))
    first = trainer.train_step(inp)
    assert not first.already_committed and first.weight_version == 1
    after_first = params(trainer.state.model)
    second = trainer.train_step(inp)
    assert second.already_committed and second.metrics == first.metrics
    assert n_changed(after_first, params(trainer.state.model)) == 0

    # A fresh process (a crash) sees the committed checkpoint too, and trains nothing.
    fresh = Trainer(device="cpu")
    assert fresh.train_step(inp).already_committed and fresh.state is None

    m = first.metrics
    for key in [
        "train/loss",
        "train/pg_loss",
        "train/pg_clipfrac",
        "train/ppo_kl",
        "train/entropy",
        "train/grad_norm",
        "train/train_rollout_logprob_abs_diff",
        "perf/train_tokens_per_second",
    ]:
        assert key in m
    assert m["train/grad_norm"] > 0 and m["train/entropy"] > 0 and m["train/n_samples"] == 4


def test_step_n_resumes_from_checkpoint_n_minus_1_after_a_crash(make_input, mixed_refs):
    a = Trainer(device="cpu")
    a.train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=0)))
    out_a = a.train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=1)))

    # Same steps, but the process dies after step 0: step 1 reloads checkpoint 0 (model, optimizer, RNG).
    run_b = Path(make_input(mixed_refs)["run_dir"]).parent / "run-b"
    b = Trainer(device="cpu")
    b.train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=0, run_dir=run_b)))
    b2 = Trainer(device="cpu")
    out_b = b2.train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=1, run_dir=run_b)))
    assert b2.state.step == 1
    wa = load_file(Path(out_a.checkpoint) / "model.safetensors")
    wb = load_file(Path(out_b.checkpoint) / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_missing_previous_checkpoint_fails(make_input, mixed_refs):
    with pytest.raises(FileNotFoundError):
        Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=3)))


def test_checkpoint_round_trip_is_bitwise(make_input, mixed_refs):
    trainer = Trainer(device="cpu")
    out = trainer.train_step(TrainStepInput.model_validate(make_input(mixed_refs)))
    state = trainer.state
    loaded = ckpt.load_checkpoint(out.checkpoint, "cpu", torch.float32)
    mine, theirs = params(state.model), params(loaded.model)
    assert mine.keys() == theirs.keys() and n_changed(mine, theirs) == 0
    opt = state.optimizer.state_dict()
    assert loaded.optimizer_state["param_groups"] == opt["param_groups"]
    assert loaded.optimizer_state["state"].keys() == opt["state"].keys()
    for i, s in opt["state"].items():
        for k, v in s.items():
            assert torch.equal(loaded.optimizer_state["state"][i][k], v), (i, k)
    assert torch.equal(loaded.rng_state["torch"], torch.get_rng_state())
    meta = json.loads((Path(out.checkpoint) / "meta.json").read_text())
    assert meta["step"] == 0 and meta["weight_version"] == 1 and meta["data_cursor"] == {"epoch": 0, "cursor": 1}
    assert meta["metrics"] == out.metrics
    assert not list(Path(out.checkpoint).parent.glob(".tmp-*"))


def test_a_crash_during_commit_leaves_no_checkpoint(make_input, mixed_refs, monkeypatch):
    trainer = Trainer(device="cpu")
    inp = TrainStepInput.model_validate(make_input(mixed_refs))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        trainer.train_step(inp)
    monkeypatch.undo()
    final = ckpt.checkpoint_dir(inp.run_dir, 0)
    assert not final.exists() and not list(final.parent.glob(".tmp-*"))
    # The in-memory model was updated but not committed: the retry must start again from the base model.
    retry = trainer.train_step(inp)
    reference = Trainer(device="cpu").train_step(
        TrainStepInput.model_validate(make_input(mixed_refs, run_dir=Path(inp.run_dir).parent / "ref"))
    )
    wa = load_file(Path(retry.checkpoint) / "model.safetensors")
    wb = load_file(Path(reference.checkpoint) / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_micro_batching_gives_the_same_gradients(make_input, mixed_refs):
    # Gradients, not parameters: Adam's first step is ≈ lr·sign(g), which amplifies float noise in tiny g.
    trainer = Trainer(device="cpu")
    for agg in ("sample_mean", "token_mean"):
        inp = TrainStepInput.model_validate(make_input(mixed_refs, loss_agg=agg))
        state = trainer.ensure_state(inp)
        batch = trainer.load_samples(inp, state)
        runs = []
        for budget in (100_000, 40):  # one micro-batch vs several
            state.model.zero_grad(set_to_none=True)
            hyper = inp.hyper.model_copy(update={"micro_batch_tokens": budget})
            metrics = {k: float(v) for k, v in accumulate_gradients(state.model, batch, hyper, NoProgress()).items()}
            runs.append((metrics, {n: p.grad.clone() for n, p in state.model.named_parameters() if p.grad is not None}))
        (m1, g1), (m2, g2) = runs
        assert m1["train/n_micro_batches"] == 1 and m2["train/n_micro_batches"] >= 2
        for key in ("train/loss", "train/pg_loss", "train/entropy", "train/train_rollout_logprob_abs_diff"):
            assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-6), key
        assert g1.keys() == g2.keys()
        for k in g1:
            scale = float(g1[k].abs().max()) + 1e-12
            torch.testing.assert_close(g1[k], g2[k], rtol=1e-3, atol=1e-4 * scale), k


def test_image_placeholder_mismatch_fails_loudly(make_input, samples):
    refs = [
        samples.sample("bad/0", image_size=(64, 48), placeholder_delta=-1, group_id="g", reward=1),
        samples.sample("bad/1", group_id="g", reward=0),
    ]
    with pytest.raises(SampleInvalid, match="placeholder"):
        Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(refs)))
    refs = [samples.sample("bad/2", image_size=(64, 48), placeholder_delta=+2, group_id="g", reward=1)]
    with pytest.raises(SampleInvalid, match="placeholder"):
        Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(refs)))


def test_cancellation_is_honoured_between_micro_batches(make_input, mixed_refs):
    class CancelAfterFirst:
        beats: list = []

        def heartbeat(self, details):
            self.beats.append(details)

        def is_cancelled(self):
            return any("micro_batch" in b for b in self.beats)

    trainer = Trainer(device="cpu")
    inp = TrainStepInput.model_validate(make_input(mixed_refs, micro_batch_tokens=40))
    with pytest.raises(StepCancelled):
        trainer.train_step(inp, CancelAfterFirst())
    assert not ckpt.checkpoint_dir(inp.run_dir, 0).exists()
    assert trainer.train_step(inp).weight_version == 1  # the retry trains normally


def test_a_step_with_no_samples_commits_without_an_update(make_input, mixed_refs):
    trainer = Trainer(device="cpu")
    first = trainer.train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=0)))
    before = params(trainer.state.model)
    empty = make_input(mixed_refs, step=1)
    empty["samples"] = []
    out = trainer.train_step(TrainStepInput.model_validate(empty))
    assert out.metrics["train/skipped"] == 1.0 and out.weight_version == 2
    assert n_changed(before, params(trainer.state.model)) == 0
    meta = json.loads((Path(out.checkpoint) / "meta.json").read_text())
    assert meta["sample_refs"] == [] and meta["optimizer_steps"] == 1
    # and the chain goes on: step 2 trains from checkpoint 1
    third = Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=2)))
    assert not third.already_committed and first.weight_version == 1


def test_a_step_of_text_only_samples_trains(make_input, samples):
    """A text-only environment's samples (no images, an environment name) train through the same path."""
    refs = [
        samples.sample(
            f"r/0/{p}/{i}",
            reward=float(i),
            group_id=f"r/0/{p}",
            seed=10 * p + i,
            response_len=4 + i,
            environment="arithmetic",
        )
        for p in range(2)
        for i in range(2)
    ]
    trainer = Trainer(device="cpu")
    out = trainer.train_step(TrainStepInput.model_validate(make_input(refs)))
    assert out.weight_version == 1 and out.metrics["train/n_samples"] == 4 and out.metrics["train/grad_norm"] > 0


def test_a_deterministic_step_runs_under_deterministic_algorithms_and_gives_the_same_weights(
    make_input, mixed_refs, monkeypatch
):
    """run.deterministic: the step runs with deterministic algorithms from a seeded generator (and the
    process's setting is restored after it); two runs of it in fresh trainers commit equal weights."""
    seen = []
    real = Trainer._apply

    def spy(self, state, inp, progress, *rest):
        seen.append((torch.are_deterministic_algorithms_enabled(), torch.initial_seed()))
        return real(self, state, inp, progress, *rest)

    monkeypatch.setattr(Trainer, "_apply", spy)
    outs = []
    for run in ("det-a", "det-b"):
        inp = make_input(mixed_refs, run_dir=Path(make_input(mixed_refs)["run_dir"]).parent / run)
        outs.append(
            Trainer(device="cpu").train_step(TrainStepInput.model_validate({**inp, "deterministic": True, "seed": 7}))
        )
    assert [s[0] for s in seen] == [True, True] and seen[0][1] == seen[1][1]
    assert not torch.are_deterministic_algorithms_enabled()
    wa, wb = (load_file(Path(o.checkpoint) / "model.safetensors") for o in outs)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert outs[0].metrics["train/loss"] == outs[1].metrics["train/loss"]
