"""The train step writes each trained sample's per-token logprobs beside it (step/token_logprobs.py):
one blob a sample, by name, at every response position, rounded to 1e-4; the ones the step compares
with the engine's (they give back train/train_rollout_logprob_abs_diff), under the weights that
sampled (a step of several updates: its old logprobs). Exactly once: written by the attempt whose
commit won, after it; an attempt that lost, a retry of a committed step, an attempt that crashed
before its commit and an SFT step write none. Bounded, and a store that refuses the write fails nothing."""

import json

import pytest
import torch

from trainer.checkpoint import atomic as ckpt
from trainer.contract import TrainStepInput
from trainer.step import token_logprobs
from trainer.step.token_logprobs import TokenLogprobs, trainer_logprobs_key
from trainer.step.train_step import Trainer


def episode_of(ref: dict) -> str:
    return ref["ref"].removeprefix("blob:named/samples/").removesuffix(".json")


def record_path(blob_dir, episode_id: str):
    return blob_dir / "named" / trainer_logprobs_key(episode_id)


def written(blob_dir, episode_id: str) -> dict:
    return json.loads(record_path(blob_dir, episode_id).read_text())


def none_written(blob_dir, refs) -> bool:
    return not any(record_path(blob_dir, episode_of(r)).exists() for r in refs)


def sample_doc(blob_dir, episode_id: str) -> dict:
    return json.loads((blob_dir / "named" / "samples" / f"{episode_id}.json").read_text())


class S:
    def __init__(self, name, n):
        self.name, self.response_len = name, n


def test_each_trained_sample_gets_its_logprobs_beside_it(make_input, mixed_refs, blob_dir):
    out = Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=0)))
    diffs, masked = 0.0, 0
    for ref in mixed_refs:
        episode = episode_of(ref)
        doc = written(blob_dir, episode)
        sample = sample_doc(blob_dir, episode)
        assert doc["schema_version"] == 1 and doc["episode_id"] == episode and doc["step"] == 0
        assert len(doc["logprobs"]) == len(sample["response_ids"])  # every response position
        assert all(lp <= 0 and round(lp, 4) == lp for lp in doc["logprobs"])
        for lp, rollout, m in zip(doc["logprobs"], sample["rollout_logprobs"], sample["loss_mask"], strict=True):
            if m:
                diffs += abs(lp - rollout)
                masked += 1
    # the step's mean |trainer − engine| over the loss-mask tokens, from the blobs (to their rounding)
    assert abs(diffs / masked - out.metrics["train/train_rollout_logprob_abs_diff"]) < 1e-4


def test_several_updates_record_the_logprobs_before_the_first(make_input, mixed_refs, blob_dir):
    Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(mixed_refs, step=0)))
    before = {episode_of(r): written(blob_dir, episode_of(r))["logprobs"] for r in mixed_refs}
    # the same step in another run, in two mini-batches: its blobs hold the same pre-update logprobs
    run_b = blob_dir.parent / "run-b"
    Trainer(device="cpu").train_step(
        TrainStepInput.model_validate(make_input(mixed_refs, step=0, run_dir=run_b, ppo_mini_batches=2))
    )
    for episode, lps in before.items():
        again = written(blob_dir, episode)["logprobs"]
        assert max(abs(a - b) for a, b in zip(lps, again, strict=True)) <= 2e-4


def test_a_retry_of_a_committed_step_writes_none(make_input, mixed_refs, blob_dir):
    inp = TrainStepInput.model_validate(make_input(mixed_refs))
    Trainer(device="cpu").train_step(inp)
    for r in mixed_refs:
        record_path(blob_dir, episode_of(r)).unlink()
    again = Trainer(device="cpu").train_step(inp)  # another process: the step is committed, nothing trains
    assert again.already_committed and none_written(blob_dir, mixed_refs)


def test_an_attempt_whose_commit_lost_writes_none(make_input, mixed_refs, blob_dir, monkeypatch):
    real = ckpt.save_checkpoint

    def other_attempt_first(run_dir, step, model, optimizer, **kw):
        real(run_dir, step, model, optimizer, **{**kw, "extra": {**kw["extra"], "attempt": "theirs"}})
        return real(run_dir, step, model, optimizer, **kw)

    monkeypatch.setattr(ckpt, "save_checkpoint", other_attempt_first)
    out = Trainer(device="cpu").train_step(TrainStepInput.model_validate(make_input(mixed_refs)))
    assert out.already_committed and none_written(blob_dir, mixed_refs)


def test_an_attempt_that_crashed_in_its_commit_writes_none_and_its_retry_does(
    make_input, mixed_refs, blob_dir, monkeypatch
):
    trainer = Trainer(device="cpu")
    inp = TrainStepInput.model_validate(make_input(mixed_refs))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        trainer.train_step(inp)
    monkeypatch.undo()
    assert none_written(blob_dir, mixed_refs)
    assert not trainer.train_step(inp).already_committed
    assert all(written(blob_dir, episode_of(r))["step"] == 0 for r in mixed_refs)


def test_an_sft_step_writes_none(make_input, mixed_refs, blob_dir):
    inp = TrainStepInput.model_validate({**make_input(mixed_refs), "algorithm": "sft"})
    assert not Trainer(device="cpu").train_step(inp).already_committed
    assert none_written(blob_dir, mixed_refs)


def test_rounded_bounded_and_non_finite_as_null(monkeypatch):
    monkeypatch.setattr(token_logprobs, "MAX_TOKENS", 3)
    record = TokenLogprobs()
    record.add(
        [S("r/0/0/0", 2), S("r/0/0/1", 3), S("r/0/0/2", 4)],
        torch.tensor([-0.123456, float("nan"), -2.5, -0.0001, -3.33333, -1.0, -1.0, -1.0, -1.0]),
    )
    record.add([S("r/0/0/0", 2)], torch.tensor([-9.0, -9.0]))  # a sample is recorded once: its first
    docs = dict(record.documents(5))
    assert list(docs) == [trainer_logprobs_key("r/0/0/0"), trainer_logprobs_key("r/0/0/1")]
    assert [d["logprobs"] for d in docs.values()] == [[-0.1235, None], [-2.5, -0.0001, -3.3333]]
    assert record.too_long == 1  # over MAX_TOKENS: no record


def test_a_store_that_refuses_the_write_fails_nothing(tmp_path):
    class Refusing:
        def put_json(self, key, value):
            raise OSError("read-only file system")

    record = TokenLogprobs()
    record.add([S("r/0/0/0", 2), S("r/0/0/1", 3)], torch.tensor([-0.1, -1.0, -2.5, -0.0001, -3.3]))
    assert record.write(Refusing(), 5) == 0
    assert record.write_to("s3://", 5) == 0  # a store that cannot be opened
    assert record.write_to(str(tmp_path), 5) == 2
