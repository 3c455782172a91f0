"""The trainer worker process: main.py (`python -m trainer.worker`), the Temporal activities, the
active/standby lock, the in-flight ledger, metric sinks, and data parallelism over torchrun's ranks."""
