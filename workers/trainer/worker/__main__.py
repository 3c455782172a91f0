"""`python -m trainer.worker`: the trainer worker process (main.py)."""

from .main import main

main()
