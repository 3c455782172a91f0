"""Which train_step failures Temporal retries: contract errors, pruned weights and CUDA OOM fail at once;
a transient filesystem error (or anything unknown) is retried."""

import pytest
import torch
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from trainer.checkpoint import atomic as ckpt
from trainer.worker.activities import TrainerActivities
from tempo_common.blobs import BlobError
from trainer.contract import TrainStepInput
from trainer.step.grpo import ContractError, group_advantages
from trainer.model.policy import SampleInvalid
from trainer.step.train_step import Trainer


class Failing:
    def __init__(self, err: Exception):
        self.err = err

    def train_step(self, inp, progress):
        raise self.err


def run_train_step(trainer, payload: dict):
    return ActivityEnvironment().run(TrainerActivities(trainer).train_step, payload)


@pytest.fixture
def payload(make_input, mixed_refs) -> dict:
    return make_input(mixed_refs, micro_batch_tokens=4096)


@pytest.mark.parametrize(
    "err, type_",
    [
        (SampleInvalid("sample x: 3 image placeholders, the images need 4"), "SampleInvalid"),
        (ContractError("unknown KL type 'k9'"), "ContractError"),
        (BlobError("blob not found: blob:named/samples/x.json"), "BlobError"),
        (
            ckpt.CheckpointPruned("step 3 needs step 2's weights, which run.keep_checkpoints pruned: /run/step-000002"),
            "CheckpointPruned",
        ),
        (
            ckpt.CheckpointCorrupt("committed checkpoint /run/step-000002 lacks or has truncated files: optimizer.pt"),
            "CheckpointCorrupt",
        ),
    ],
)
def test_errors_a_retry_cannot_fix_are_non_retryable(payload, err, type_):
    with pytest.raises(ApplicationError) as info:
        run_train_step(Failing(err), payload)
    assert info.value.non_retryable and info.value.type == type_
    assert str(err) in info.value.message


def test_an_invalid_payload_is_non_retryable(payload):
    with pytest.raises(ApplicationError) as info:
        run_train_step(Failing(AssertionError("not reached")), {**payload, "step": -1})
    assert info.value.non_retryable and info.value.type == "ValidationError"


def test_cuda_oom_is_non_retryable_and_names_the_micro_batch_budget(payload):
    with pytest.raises(ApplicationError) as info:
        run_train_step(Failing(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")), payload)
    assert info.value.non_retryable and info.value.type == "OutOfMemoryError"
    assert "grpo.micro_batch_tokens (now 4096)" in info.value.message and "Tried to allocate" in info.value.message


@pytest.mark.parametrize(
    "err",
    [
        FileNotFoundError("[Errno 2] No such file or directory: '/run/checkpoints/step-000002/optimizer.pt'"),
        OSError("[Errno 5] Input/output error"),
        ValueError("a ValueError that is no contract error"),
    ],
)
def test_other_errors_are_retried(payload, err):
    with pytest.raises(type(err)) as info:
        run_train_step(Failing(err), payload)
    assert info.value is err and not isinstance(info.value, ApplicationError)


def test_the_trainer_raises_the_classes_the_activity_expects(make_input, mixed_refs, tmp_path):
    with pytest.raises(ContractError):
        group_advantages([1.0, 0.0], ["g"])
    run_dir = tmp_path / "pruned"
    trainer = Trainer(device="cpu")
    for step in range(3):
        inp = TrainStepInput.model_validate({**make_input(mixed_refs, step=step, run_dir=run_dir), "samples": []})
        trainer.train_step(inp.model_copy(update={"keep_checkpoints": 2}))
    step0 = TrainStepInput.model_validate({**make_input(mixed_refs, step=0, run_dir=run_dir), "samples": []})
    with pytest.raises(ApplicationError, match="keep_checkpoints") as info:
        run_train_step(Trainer(device="cpu"), step0.model_dump())
    assert info.value.non_retryable and info.value.type == "CheckpointPruned"
    step1 = step0.model_copy(update={"step": 1})
    with pytest.raises(ckpt.CheckpointPruned, match="step 1 needs step 0's weights"):
        Trainer(device="cpu").ensure_state(step1)


class Reached:
    """Stands for the trainer: records that the activity let the step through."""

    def __init__(self):
        self.called = False

    def train_step(self, inp, progress):
        self.called = True
        raise ckpt.CheckpointMissing("reached the trainer")


def test_a_blob_store_of_another_stack_is_refused_retryably_naming_both(payload, tmp_path):
    own = tmp_path / "own-blobs"
    own.mkdir()
    trainer = Reached()
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(TrainerActivities(trainer, str(own)).train_step, payload)
    assert not info.value.non_retryable and info.value.type == "BlobRootUnreachable"
    assert payload["blob_store"] in info.value.message and str(own.resolve()) in info.value.message
    assert not trainer.called


def test_a_blob_store_missing_on_this_machine_is_refused_retryably(payload, tmp_path):
    missing = str(tmp_path / "elsewhere" / "blobs")
    trainer = Reached()
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(TrainerActivities(trainer).train_step, {**payload, "blob_store": missing})
    assert not info.value.non_retryable and info.value.type == "BlobRootUnreachable"
    assert f"blob store {missing} does not exist on this machine" in info.value.message
    assert "started without --blob-store" in info.value.message and not trainer.called


def test_blob_store_uris_are_compared_parsed_an_s3_store_is_not_a_local_one(payload, tmp_path):
    own = tmp_path / "own-blobs"
    own.mkdir()
    for given in ("s3://tempo-bucket/blobs", "gs://bucket"):
        trainer = Reached()
        with pytest.raises(ApplicationError) as info:
            ActivityEnvironment().run(TrainerActivities(trainer, str(own)).train_step, {**payload, "blob_store": given})
        assert info.value.type == "BlobRootUnreachable" and given in info.value.message and not trainer.called
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(
            TrainerActivities(Reached(), "s3://tempo-bucket/blobs").train_step,
            {**payload, "blob_store": "s3://tempo-bucket/other"},
        )
    assert (
        "given blob store s3://tempo-bucket/other" in info.value.message
        and "is s3://tempo-bucket/blobs" in info.value.message
    )


def test_the_workers_own_blob_store_is_let_through(payload):
    trainer = Reached()
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(TrainerActivities(trainer, payload["blob_store"]).train_step, payload)
    assert trainer.called and info.value.type == "CheckpointMissing"
