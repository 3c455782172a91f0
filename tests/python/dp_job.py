"""Run by torchrun in tests/python/test_data_parallel.py: a data-parallel trainer group trains the
train-step inputs of a JSON-lines file, in order; rank 0 prints each step's output as a JSON line.
--reload: rank 0 drops its state after each step, so the next one loads the checkpoint (a restart).
--ipc: then the last step's weights go through the ipc transport (every rank packs buckets) to a
stand-in engine on rank 0 that opens each bucket and prints a digest of each tensor it holds.
--segment-per-micro-batch: images encoded ahead (TEMPO_RL_VISION_ONCE=1) start a segment at every
micro-batch that shows a new one; rank 0 prints how many segments it encoded."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from trainer.contract import TrainStepInput
from trainer.model import image_features
from trainer.worker.data_parallel import DataParallelTrainer, follow
from trainer.worker.dp_group import DataParallelGroup
from trainer.weights.ipc import IpcLoader


# An engine worker's side, in a process of its own: CUDA IPC handles open in another process only.
READER = """
import json, sys, torch
from tempo_common import weight_buckets
device = torch.device(sys.argv[1])
for line in sys.stdin:
    desc = json.loads(line)
    buf = weight_buckets.open_bucket(desc, device)
    print(json.dumps({n: [float(t.double().sum()), float(t.double().square().sum())]
                      for n, t in weight_buckets.views(buf, weight_buckets.entries_of(desc))}), flush=True)
"""


class BucketReader:
    """A stand-in engine: opens each bucket as an engine worker would (in another process) and records
    a digest per tensor."""

    url = "stand-in"

    def __init__(self, device: torch.device):
        self.digests: dict = {}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", READER, str(device)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def rpc(self, method: str, bucket: str | None = None, **_) -> list:  # the update's mode: one way here
        if method == "tempo_rl_load_bucket":
            self.proc.stdin.write(bucket + "\n")
            self.proc.stdin.flush()
            self.digests |= json.loads(self.proc.stdout.readline())
        return [None]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def sync_by_ipc(trainer: DataParallelTrainer, checkpoint: str) -> dict:
    reader = BucketReader(trainer.device)
    try:
        with trainer.ipc_source(checkpoint, torch.float32, 4 * 2**20) as source:
            errors = IpcLoader(source, torch.float32, 4 * 2**20).load([reader], lambda d: None)
    finally:
        reader.close()
    assert not errors, errors
    return reader.digests


def count_segments() -> list[int]:
    """Each segment rank 0 encodes, from now on; SEGMENT_TOKENS_PER_BUDGET 0: a segment per
    micro-batch with a new image."""
    image_features.SEGMENT_TOKENS_PER_BUDGET = 0
    seen: list[int] = []
    encode = image_features.EncodedImages.__init__

    def counted(self, *args, **kwargs):
        seen.append(1)
        encode(self, *args, **kwargs)

    image_features.EncodedImages.__init__ = counted
    return seen


def main() -> None:
    torch.set_num_threads(1)
    segments = count_segments() if "--segment-per-micro-batch" in sys.argv else None
    inputs = [json.loads(line) for line in open(sys.argv[1])]
    group = DataParallelGroup()
    trainer = DataParallelTrainer(group)
    try:
        if not group.is_rank0:
            follow(group, trainer)
            return
        try:
            for doc in inputs:
                out = trainer.train_step(TrainStepInput.model_validate(doc))
                print(json.dumps(out.model_dump()), flush=True)
                if "--reload" in sys.argv:
                    trainer.state = None
            if segments is not None:
                print(json.dumps({"segments": len(segments)}), flush=True)
            if "--ipc" in sys.argv:
                print(json.dumps({"ipc_digests": sync_by_ipc(trainer, out.checkpoint)}), flush=True)
        finally:
            group.send(None)
    finally:
        group.close()


if __name__ == "__main__":
    main()
