"""The checkpoint format and its atomic commit (atomic.py), and a data-parallel trainer's (sharded.py).
Where a checkpoint is stored besides the local directory is stores/checkpoints.py's."""
