"""Several optimizer updates per step (grpo.ppo_mini_batches, ppo_epochs): the PPO ratio is taken
against the weights that sampled, so from the second update on the clip can bind."""

import torch

from trainer.contract import Hyper, TrainStepInput
from trainer.step.train_step import Trainer, update_batches


def test_update_batches_are_consecutive_slices_repeated_per_epoch():
    samples = list(range(8))
    assert update_batches(samples, Hyper(ppo_mini_batches=4)) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert update_batches(samples, Hyper(ppo_mini_batches=3, ppo_epochs=2)) == [[0, 1, 2], [3, 4, 5], [6, 7]] * 2
    assert update_batches(samples[:2], Hyper(ppo_mini_batches=5)) == [[0], [1]]
    assert update_batches(samples, Hyper()) == [samples]


def test_one_step_of_several_updates_applies_each_and_clips_against_the_sampling_weights(
    make_input, mixed_refs, tmp_path
):
    one = Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(mixed_refs, lr=1e-2)))
    assert one.metrics["train/updates"] == 1
    assert one.metrics["train/pg_clipfrac"] == 0, "a single on-policy update has ratio 1 everywhere"

    trainer = Trainer(device="cpu")
    several = TrainStepInput.model_validate(
        make_input(mixed_refs, run_dir=tmp_path / "several", lr=1e-2, ppo_mini_batches=2, ppo_epochs=3)
    )
    base = {k: v.clone() for k, v in trainer.ensure_state(several).model.state_dict().items()}
    out = trainer.train_step(several)
    m = out.metrics
    assert m["train/updates"] == 6 and m["train/nonfinite_step"] == 0
    # Later updates see weights moved by earlier ones: ratios leave 1, the clip binds somewhere.
    assert m["train/pg_clipfrac"] > 0 and abs(m["train/ppo_kl"]) > 0
    moved = sum(not torch.equal(base[k], v) for k, v in trainer.state.model.state_dict().items())
    assert moved > 0
    # The trainer-vs-engine mismatch is measured on the weights that sampled, not on moved ones.
    before = one.metrics["train/train_rollout_logprob_abs_diff"]
    assert abs(m["train/train_rollout_logprob_abs_diff"] - before) < 1e-4 * before
