"""Checkpoints committed in a remote blob store (checkpoints.py). The store itself, and the commit
records that engines read too, are tempo_common's (blobs.py, commit_records.py)."""
