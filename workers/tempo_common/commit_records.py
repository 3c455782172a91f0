"""A step committed in a blob store, as its readers see it: the commit record and the files it names.

The trainer writes these records (trainer/stores/checkpoints.py: `<key>/COMMIT.json`, written last,
only if absent); engines read them to pull weights (tempo_engine/weights_from_store.py). A record is
checkpoint/atomic.py's meta.json plus the attempt's key prefix and each file's SHA-256; a reader trusts
records only, and checks the size and digest of every file it downloads."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .blobs import BlobStoreBase

COMMIT = "COMMIT.json"


class CheckpointCorrupt(RuntimeError):
    """A committed step whose files do not match its commit record: no retry brings them back."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(store: BlobStoreBase, record: dict, dest: Path, names: list[str]) -> None:
    """The named files of a record into `dest`, each checked against the record's size and digest."""
    for name in names:
        file = dest / name
        file.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(store.named_ref(f"{record['prefix']}/{name}"), file)
        size, digest = record["files"][name], record.get("digests", {}).get(name)
        if file.stat().st_size != size or (digest is not None and sha256_of(file) != digest):
            raise CheckpointCorrupt(
                f"{store.uri}: {record['prefix']}/{name} does not match its commit record"
                f" (size {file.stat().st_size}, recorded {size})"
            )
