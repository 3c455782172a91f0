"""Engines pull their weights from the blob store: no filesystem shared with the trainer.

The engine worker extension (extension.py, `tempo_rl_reload_from_store`, run on every
worker by POST /collective_rpc {"method": "tempo_rl_reload_from_store", "kwargs": {"store": URI, "key":
KEY}}) calls `pull_weights`: it reads the commit record `KEY/COMMIT.json` (tempo_common/commit_records.py),
downloads the model files it names — not the optimizer state — into a local cache, checks their sizes
and digests, and the worker then reloads them in place with its own `reload_weights`, as the disk
transport does. The engine reaches the store with the standard AWS_* variables of its environment.

Cache: `$TEMPO_RL_ENGINE_WEIGHTS_DIR` (`<state_dir>/engines/weights` for engines tempo-rl starts), one
directory per commit record, renamed in whole; a record already pulled is not downloaded again (a retried
sync, or several workers of one engine on one host). The newest few are kept."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import closing
from pathlib import Path

from tempo_common.blobs import open_blob_store
from tempo_common.commit_records import COMMIT, download

KEEP = 3
# A full checkpoint's training state, which engines never read.
_TRAINING_ONLY = ("optimizer.pt", "rng.pt")


def cache_root() -> Path:
    return Path(
        os.environ.get("TEMPO_RL_ENGINE_WEIGHTS_DIR") or Path(tempfile.gettempdir()) / "tempo-rl-engine-weights"
    )


def model_files(record: dict) -> list[str]:
    return [n for n in record["files"] if n not in _TRAINING_ONLY and "/" not in n]  # dcp/…: a sharded optimizer


def pull_weights(store_uri: str, key: str, root: Path | None = None) -> Path:
    """The local model directory of the weights committed at `key` (downloaded unless already here)."""
    root = root or cache_root()
    with closing(open_blob_store(store_uri)) as store:
        record = store.get_json(store.named_ref(f"{key}/{COMMIT}"))
        if record.get("pruned"):
            raise FileNotFoundError(f"{store_uri} {key}: its weights were pruned (run.keep_checkpoints)")
        dest = root / f"{key.replace('/', '--')}--{record['attempt']}"
        if dest.is_dir():
            os.utime(dest)
            return dest
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            download(store, record, tmp, model_files(record))
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for old in sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".tmp-")), key=lambda p: p.stat().st_mtime
    )[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return dest
