"""tempo-rl trainer: the Python Temporal worker (GRPO, checkpoints, weight sync) and the tiny model."""
