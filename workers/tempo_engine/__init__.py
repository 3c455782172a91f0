"""tempo-rl's engine side: the code that runs inside vLLM's processes.

- main.py: the server's entry point (`python -m tempo_engine.main`), which imports nothing itself;
- compat.py: what differs between the vLLM releases tempo-rl runs on, handled in one place;
- labels.py: weight-version labels for releases that have none of their own;
- extension.py: the worker extension (weights pulled from the blob store, or handed over in buckets);
- buckets.py: the bucket protocol, shared with the trainer that fills the buckets;
- weights_from_store.py: a committed checkpoint's model files pulled from the blob store (the
  extension's `tempo_rl_reload_from_store`), through the trainer's store code (trainer/stores).

Nothing here imports vLLM at module level except extension.py, which only vLLM's workers import."""
