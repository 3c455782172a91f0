"""Blob store URIs: `s3://bucket[/prefix]`, `file:///path` or a path — parsed, made canonical and
compared (the same rules as parseBlobStoreUri in stores/blobstore.ts)."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from urllib.parse import unquote, urlsplit


class BlobError(ValueError):
    pass


class BlobRootUnreachable(Exception):
    """The work's blob store is not one this worker reaches. Retryable: another worker may reach it.
    (The name is the error type both sides raise, activities/blob-root.ts.)"""


def check_blob_store(given: str, own: str | Path | None) -> None:
    """Refuses work whose blob store (URI or directory) is not this worker's (`own`; None: not told) or, when
    local, is missing here: its samples would be "not found" one by one. Locations compare parsed."""
    reach = (
        f"this trainer worker's blob store is {canonical_blob_store_uri(str(own))}"
        if own is not None
        else "this trainer worker was started without --blob-store"
    )
    try:
        where = parse_blob_store_uri(given)
    except BlobError as err:
        raise BlobRootUnreachable(f"{err}; {reach}") from None
    if where[0] == "local" and not Path(where[1]).is_dir():
        raise BlobRootUnreachable(
            f"blob store {given} does not exist on this machine ({socket.gethostname()}); {reach}"
        )
    if own is not None and where != parse_blob_store_uri(str(own)):
        raise BlobRootUnreachable(
            f"given blob store {given}, but {reach}: the task reached a worker of another stack "
            "(give each stack its own temporal.task_queues: the default)"
        )


def canonical_blob_store_uri(uri: str) -> str:
    """file:///abs/path or s3://bucket[/prefix], as BlobStore.uri spells it."""
    kind, where, prefix = parse_blob_store_uri(uri)
    return Path(where).as_uri() if kind == "local" else f"s3://{where}" + (f"/{prefix}" if prefix else "")


_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_URI = re.compile(r"^s3://([^/?#]*)(/[^?#]*)?([?#].*)?$", re.IGNORECASE)


def _bad(uri: object, why: str) -> BlobError:
    return BlobError(f"bad blob store URI {json.dumps(uri) if isinstance(uri, str) else repr(uri)}: {why}")


# The virtual filesystems base/out-path.ts refuses by path (a store there spins on its first write); the
# TypeScript side also asks statfs, which Python's standard library cannot.
_VIRTUAL_ROOTS = ("/proc", "/sys")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _user_path_problem(p: str) -> str | None:
    """What parseUserPath (base/out-path.ts) refuses in a path as given: blank, padded, control characters, ~user."""
    if not p.strip():
        return "blank (only whitespace)"
    if p.strip() != p:
        return "starts or ends with whitespace"
    m = _CONTROL.search(p)
    if m:
        return "holds a NUL" if m.group() == "\0" else f"holds the control character {json.dumps(m.group())}"
    if p.startswith("~") and p != "~" and not p.startswith("~/"):
        return f"{p.split('/')[0]} (another user's home) is not expanded; give the absolute path"
    return None


def _local_root(uri: object, given: str) -> str:
    """The absolute directory of a path as given (after percent-decoding for file: URLs): `~/` expanded to
    the home directory (as base/out-path.ts parseUserPath: a quoted `~` reaches here unexpanded by any
    shell), never under a virtual filesystem."""
    problem = _user_path_problem(given)
    if problem:
        raise _bad(uri, f"the path {json.dumps(given)} {problem}")
    expanded = str(Path.home()) + given[1:] if given == "~" or given.startswith("~/") else given
    root = os.path.abspath(expanded)
    resolved = str(Path(root).resolve())
    for r in _VIRTUAL_ROOTS:
        if any(p == r or p.startswith(r + "/") for p in (root, resolved)):
            raise _bad(uri, f"{root} is under {r}, a virtual filesystem, not a place for files")
    return resolved


def parse_blob_store_uri(uri: object) -> tuple[str, str, str]:
    """("local", root, "") or ("s3", bucket, prefix); BlobError naming the value otherwise. The same
    rules as parseBlobStoreUri in stores/blobstore.ts."""
    if not isinstance(uri, str):
        raise _bad(uri, "a blob store URI must be a string")
    if not uri:
        raise _bad(uri, "empty (give s3://bucket/prefix, file:///path or a path)")
    # Before any parsing, as stores/blobstore.ts: padding and control characters are never part of a URI.
    problem = _user_path_problem(uri)
    if problem:
        raise _bad(uri, problem)
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*):", uri)
    scheme = m.group(1).lower() if m else None
    if scheme == "s3":
        s = _S3_URI.match(uri)
        if not s:
            raise _bad(uri, "not of the form s3://bucket/prefix")
        bucket, raw_prefix, rest = s.group(1), s.group(2) or "", s.group(3)
        if rest:
            raise _bad(
                uri,
                "a query or fragment is not allowed (endpoint, region and credentials come from the AWS_* variables)",
            )
        if not bucket:
            raise _bad(uri, "no bucket (s3://bucket/prefix)")
        if "@" in bucket or ":" in bucket:
            raise _bad(
                uri,
                f"bucket {json.dumps(bucket)} holds credentials or a port; set AWS_ENDPOINT_URL_S3 and the AWS_* credential variables instead",
            )
        if not _S3_BUCKET.match(bucket) or ".." in bucket or re.match(r"^\d+\.\d+\.\d+\.\d+$", bucket):
            raise _bad(
                uri,
                f"bucket {json.dumps(bucket)} is not a valid S3 bucket name (3-63 of a-z 0-9 . -, starting and ending with a letter or digit)",
            )
        prefix = raw_prefix.strip("/")
        if prefix:
            if any(seg in ("", ".", "..") for seg in prefix.split("/")):
                raise _bad(uri, f'prefix {json.dumps(prefix)} has an empty, "." or ".." segment')
            if "\0" in prefix or "\\" in prefix:
                raise _bad(uri, f"prefix {json.dumps(prefix)} holds a NUL or a backslash")
        return ("s3", bucket, prefix)
    if scheme not in (None, "file"):
        raise _bad(uri, f'unsupported scheme "{scheme}:" (give s3://bucket/prefix, file:///path or a path)')
    if scheme is None:
        return ("local", _local_root(uri, uri), "")
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise _bad(uri, f"not a local file URL (file:///absolute/path): host {parts.netloc!r}")
    if not uri[5:].startswith("//") or not parts.path.startswith("/"):
        raise _bad(uri, "not a local file URL (file:///absolute/path)")
    if parts.query or parts.fragment or uri.endswith(("?", "#")):
        raise _bad(uri, "not a local file URL (file:///absolute/path): a query or fragment is not allowed")
    # Checked again after percent-decoding: %00 or %0A is a NUL or a newline in the path.
    return ("local", _local_root(uri, unquote(parts.path)), "")
