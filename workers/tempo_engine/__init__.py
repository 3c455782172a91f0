"""tempo-rl's engine side: the code that runs inside vLLM's processes.

- main.py: the server's entry point (`python -m tempo_engine.main`), which imports nothing itself;
- compat.py: what differs between the vLLM releases tempo-rl runs on, handled in one place;
- labels.py: weight-version labels for releases that have none of their own;
- extension.py: the worker extension (weights pulled from the blob store, or handed over in buckets);
- weights_from_store.py: a committed checkpoint's model files pulled from the blob store (the
  extension's `tempo_rl_reload_from_store`).

What the trainer shares with this side (the blob store, the commit records, the weight buckets) is in
tempo_common; this package imports no trainer code.

Nothing here imports vLLM at module level except extension.py, which only vLLM's workers import."""
