"""Resolves `blob:` references against the blob root (the Python side of lib/blobstore.ts)."""
from __future__ import annotations

import json
import socket
from pathlib import Path

BLOB_PREFIX = "blob:"


class BlobError(ValueError):
    pass


class BlobRootUnreachable(Exception):
    """The work's blob root is not one this worker reaches. Retryable: another worker may reach it."""


def check_blob_root(given: str, own: str | Path | None) -> None:
    """Refuses work whose blob store is not this worker's (`own`, None where the worker was not told
    its root) or does not exist on this machine: its samples would be "not found" one by one."""
    reach = f"this trainer worker's blob root is {Path(own).resolve()}" if own is not None else "this trainer worker was started without --blob-root"
    if not Path(given).is_dir():
        raise BlobRootUnreachable(f"blob root {given} does not exist on this machine ({socket.gethostname()}); {reach}")
    if own is not None and Path(given).resolve() != Path(own).resolve():
        raise BlobRootUnreachable(f"given blob root {given}, but {reach}: the task reached a worker of another stack "
                                  "(give each stack its own temporal.task_queues: the default)")


class BlobStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def path_of(self, ref: str) -> Path:
        """The file behind a reference; refuses anything that would leave the root."""
        if not isinstance(ref, str) or not ref.startswith(BLOB_PREFIX):
            raise BlobError(f"not a blob reference: {ref!r}")
        rel = ref[len(BLOB_PREFIX):]
        if not rel or "\0" in rel or rel.startswith(("/", "\\")) or Path(rel).is_absolute():
            raise BlobError(f"blob reference escapes the store: {ref!r}")
        full = (self.root / rel).resolve()
        if not full.is_relative_to(self.root) or full == self.root:
            raise BlobError(f"blob reference escapes the store: {ref!r}")
        return full

    def get_bytes(self, ref: str) -> bytes:
        try:
            return self.path_of(ref).read_bytes()
        except FileNotFoundError:
            raise BlobError(f"blob not found: {ref}") from None

    def get_json(self, ref: str):
        data = self.get_bytes(ref)
        try:
            return json.loads(data)
        except json.JSONDecodeError as err:
            raise BlobError(f"blob {ref} is not valid JSON: {err}") from None
