"""algorithm "sft" through train_step: masked NLL that falls on its own batch, masked tokens that do not
count, the same exactly-once commit as GRPO, and checkpoint pruning (run.keep_checkpoints)."""

import pytest
import torch

from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.model.policy import forward_response
from trainer.step.train_step import Trainer


def batch_nll(trainer: Trainer, inp: TrainStepInput) -> float:
    """Token-mean NLL of the batch's mask-1 tokens under the trainer's current weights."""
    samples = trainer.load_samples(inp, trainer.state)
    with torch.no_grad():
        fwd = forward_response(trainer.state.model, samples, 1.0, with_entropy=False)
    num = sum(float(-(lp * s.loss_mask).sum()) for lp, s in zip(fwd.logprobs, samples, strict=False))
    return num / sum(float(s.loss_mask.sum()) for s in samples)


def sft_input(make_input, refs, step=0, **kw) -> TrainStepInput:
    return TrainStepInput.model_validate({**make_input(refs, step=step, **kw), "algorithm": "sft"})


def test_an_sft_step_lowers_the_nll_of_its_batch(make_input, mixed_refs):
    trainer = Trainer(device="cpu")
    inp = sft_input(make_input, mixed_refs)
    trainer.ensure_state(inp)
    before = batch_nll(trainer, inp)
    out = trainer.train_step(inp)
    assert abs(out.metrics["sft/nll"] - before) < 1e-4, (
        "the logged NLL is the batch's masked token mean before the update"
    )
    after = batch_nll(trainer, inp)
    assert after < before - 0.05, (before, after)
    assert out.metrics["train/grad_norm"] > 0 and "train/pg_loss" not in out.metrics
    # exactly once: the same step again trains nothing and returns the recorded metrics
    again = trainer.train_step(inp)
    assert again.already_committed and again.metrics == out.metrics
    assert abs(batch_nll(trainer, inp) - after) < 1e-6


def test_masked_tokens_do_not_count():
    """Prompt and observation tokens (mask 0) get no gradient; the loss is the mask-1 token mean."""
    from trainer.step.grpo import aggregation_weights, sft_loss

    logp = torch.tensor([-1.0, -2.0, -9.0, -9.0, -3.0], requires_grad=True)
    mask = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0])
    weights = torch.cat(aggregation_weights([mask], "token_mean", 1, int(mask.sum())))
    loss, metrics = sft_loss(logp, weights)
    loss.backward()
    assert abs(loss.item() - 2.0) < 1e-6 and abs(metrics["sft/nll"].item() - 2.0) < 1e-6
    assert logp.grad[2] == 0 and logp.grad[3] == 0 and logp.grad[0] != 0


def test_keep_checkpoints_prunes_weights_but_not_the_commit_record(make_input, mixed_refs, tmp_path):
    trainer = Trainer(device="cpu")
    run_dir = tmp_path / "pruned"
    for step in range(3):
        trainer.train_step(
            sft_input(make_input, mixed_refs, step=step, run_dir=run_dir).model_copy(update={"keep_checkpoints": 2})
        )
    dirs = [ckpt.checkpoint_dir(run_dir, s) for s in range(3)]
    assert all(ckpt.is_committed(d) for d in dirs), "every step stays committed (exactly once, audit)"
    assert sorted(p.name for p in dirs[0].iterdir()) == [".pruned", "meta.json"]
    assert (dirs[1] / "model.safetensors").exists() and (dirs[2] / "optimizer.pt").exists()
    assert ckpt.read_meta(dirs[0])["sample_refs"] == [r["ref"] for r in mixed_refs]
    # A run resumed from before a pruned step cannot use its weights: a clear error, not a broken sync.
    with pytest.raises(FileNotFoundError, match="pruned"):
        Trainer(device="cpu").train_step(sft_input(make_input, mixed_refs, step=0, run_dir=run_dir))
    # the newest steps keep their weights: a retried step 2 is answered from its record
    assert (
        Trainer(device="cpu").train_step(sft_input(make_input, mixed_refs, step=2, run_dir=run_dir)).already_committed
    )
