"""Run by torchrun in tests/python/test_data_parallel.py: a data-parallel trainer group trains the
train-step inputs of a JSON-lines file, in order; rank 0 prints each step's output as a JSON line.
--reload: rank 0 drops its state after each step, so the next one loads the checkpoint (a restart)."""
from __future__ import annotations

import json
import sys

import torch

from trainer.contract import TrainStepInput
from trainer.data_parallel import DataParallelTrainer, follow
from trainer.dp_group import DataParallelGroup


def main() -> None:
    torch.set_num_threads(1)
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
        finally:
            group.send(None)
    finally:
        group.close()


if __name__ == "__main__":
    main()
