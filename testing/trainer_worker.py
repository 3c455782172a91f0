"""The tests' trainer worker: the product's (`python -m trainer.worker`, the same flags) with the
test-only activity trainer_info, which says which worker of which stack answered (the round trip and
stack isolation: testing/workflows/round-trip.ts). The product's worker never serves it. Run with
workers/ on PYTHONPATH (testing/temporal.ts testTrainerCommand):

    python testing/trainer_worker.py --task-queue Q [the other flags of trainer.worker]"""

from __future__ import annotations

import platform

import torch
import transformers
from temporalio import activity
from trainer.contract import Strict
from tempo_common.blobs import canonical_blob_store_uri
from trainer.worker.main import main


class TrainerInfoOutput(Strict):
    """testing/test-contract.ts TrainerInfo."""

    torch_version: str
    device: str
    cuda_available: bool
    python_version: str
    transformers_version: str
    loaded_run: str | None = None
    loaded_step: int | None = None
    # The worker's blob store (--blob-store), canonical; None when it was started without one.
    blob_store: str | None = None


def info_activities(activities) -> list:
    """trainer_info, answered from the product's TrainerActivities (its trainer, its blob store)."""

    @activity.defn(name="trainer_info")
    def trainer_info(payload: dict | None = None) -> dict:
        state = activities.trainer.state
        store = activities.blob_store
        return TrainerInfoOutput(
            torch_version=torch.__version__,
            device=str(activities.trainer.device),
            cuda_available=torch.cuda.is_available(),
            python_version=platform.python_version(),
            transformers_version=transformers.__version__,
            loaded_run=state.run_id if state else None,
            loaded_step=state.step if state else None,
            blob_store=canonical_blob_store_uri(store) if store is not None else None,
        ).model_dump()

    return [trainer_info]


if __name__ == "__main__":
    main(extra_activities=info_activities)
