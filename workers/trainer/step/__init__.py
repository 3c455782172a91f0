"""One GRPO (or SFT) step, exactly once: train_step.py, and what it is made of."""
