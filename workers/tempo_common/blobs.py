"""Resolves `blob:` references against the blob store (the Python side of stores/blobstore.ts).

Two stores, one shape (BlobStoreBase), chosen by a store URI (open_blob_store):
  a path or file:///path   BlobStore (alias LocalBlobStore): files under that directory
  s3://bucket[/prefix]     S3BlobStore: objects <prefix>/<ref's path> on S3 or any S3-compatible
                           server, configured by the standard AWS_* variables
A reference means the same in both, and the same as in TypeScript: the same bytes give the same
`blob:cas/<2 hex>/<sha256>.<ext>` ref; `blob:named/<key>` are JSON documents.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import secrets
import shutil
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any
from collections.abc import Mapping
from urllib.parse import urlsplit

# Re-exported: callers import the store's names from this one module.
from .blob_uri import BlobError as BlobError
from .blob_uri import BlobRootUnreachable as BlobRootUnreachable
from .blob_uri import canonical_blob_store_uri as canonical_blob_store_uri
from .blob_uri import check_blob_store as check_blob_store
from .blob_uri import parse_blob_store_uri

BLOB_PREFIX = "blob:"


def _cas_ref(data: bytes, ext: str) -> str:
    digest = hashlib.sha256(data).hexdigest()
    return f"{BLOB_PREFIX}cas/{digest[:2]}/{digest}.{ext}"


def _json_bytes(key: str, value: Any) -> bytes:
    """The same text as TypeScript's JSON.stringify (compact, UTF-8); NaN and infinities refused."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise BlobError(f"blob:named/{key}: not JSON: {err}") from None


def ref_path(ref: str) -> str:
    """The store-relative path of a reference, normalised (`a/./b`, `a//b`, `a/x/../b` → `a/b`), refusing
    what would leave the store; the same rules as refPath in stores/blobstore.ts (object keys on S3)."""
    if not isinstance(ref, str) or not ref.startswith(BLOB_PREFIX):
        raise BlobError(f"not a blob reference: {ref!r}")
    rel = ref[len(BLOB_PREFIX) :]
    if not rel or "\0" in rel or rel.startswith(("/", "\\")):
        raise BlobError(f"blob reference escapes the store: {ref!r}")
    norm = posixpath.normpath("/r/" + rel)
    if not norm.startswith("/r/"):
        raise BlobError(f"blob reference escapes the store: {ref!r}")
    return norm[len("/r/") :]


class BlobStoreBase(ABC):
    """What every blob store offers (stores/blobstore.ts's BlobStore, plus put_json_if_absent)."""

    uri: str

    def close(self) -> None:  # an S3 client's connections; a local store holds nothing open
        pass

    @abstractmethod
    def get_bytes(self, ref: str) -> bytes:
        """The bytes behind a reference; BlobError "blob not found: <ref>" when there are none."""

    @abstractmethod
    def put_bytes(self, data: bytes, ext: str = "bin") -> str:
        """Stores bytes content-addressed (stored once); returns `blob:cas/<2 hex>/<sha256>.<ext>`."""

    @abstractmethod
    def put_json(self, key: str, value: Any) -> str:
        """Writes JSON under `blob:named/<key>`, replacing what was there; never seen half-written."""

    @abstractmethod
    def put_json_if_absent(self, key: str, value: Any) -> bool:
        """Writes `blob:named/<key>` only if nothing is there: True when this call created it. Atomic
        against concurrent writers (a hard link; `If-None-Match: *` on S3): for commit records."""

    @abstractmethod
    def exists(self, ref: str) -> bool:
        """Whether a reference has a blob (False also for a reference this store refuses)."""

    @abstractmethod
    def put_file(self, key: str, path: str | Path) -> str:
        """Uploads a file (any size; multipart on S3) to `blob:named/<key>`, replacing what was there."""

    @abstractmethod
    def get_file(self, ref: str, dest: str | Path) -> None:
        """Downloads a blob to `dest` (a path the caller owns: it is written in place, not atomically)."""

    @abstractmethod
    def list_named(self, prefix: str) -> list[str]:
        """The keys under `blob:named/<prefix>/`, sorted."""

    @abstractmethod
    def delete(self, ref: str) -> None:
        """Removes a blob (nothing happens when there is none)."""

    def get_json(self, ref: str):
        data = self.get_bytes(ref)
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise BlobError(f"blob {ref} is not valid JSON: {err}") from None

    @staticmethod
    def named_ref(key: str) -> str:
        return f"{BLOB_PREFIX}named/{key}"


class BlobStore(BlobStoreBase):
    """The blob store on a local or shared filesystem (stores/blobstore.ts's LocalBlobStore)."""

    def __init__(self, root: str | Path):
        if isinstance(root, str) and re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", root):
            # a store URI given where a directory is expected would quietly become ./s3:/bucket/…
            raise BlobError(f"BlobStore takes a directory, not the URI {root!r}: open a store URI with open_blob_store")
        self.root = Path(root).resolve()

    @property
    def uri(self) -> str:
        return self.root.as_uri()

    def path_of(self, ref: str) -> Path:
        """The file behind a reference; refuses anything that would leave the root."""
        if not isinstance(ref, str) or not ref.startswith(BLOB_PREFIX):
            raise BlobError(f"not a blob reference: {ref!r}")
        rel = ref[len(BLOB_PREFIX) :]
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

    def _tmp_beside(self, file: Path, data: bytes) -> Path:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f"{file.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        tmp.write_bytes(data)
        return tmp

    def _write_atomic(self, file: Path, data: bytes) -> None:
        tmp = self._tmp_beside(file, data)
        try:
            os.replace(tmp, file)
        finally:
            tmp.unlink(missing_ok=True)

    def put_bytes(self, data: bytes, ext: str = "bin") -> str:
        ref = _cas_ref(bytes(data), ext)
        file = self.path_of(ref)
        if not file.exists():
            self._write_atomic(file, bytes(data))
        return ref

    def put_json(self, key: str, value: Any) -> str:
        ref = self.named_ref(key)
        self._write_atomic(self.path_of(ref), _json_bytes(key, value))
        return ref

    def put_json_if_absent(self, key: str, value: Any) -> bool:
        file = self.path_of(self.named_ref(key))
        tmp = self._tmp_beside(file, _json_bytes(key, value))
        try:
            os.link(tmp, file)  # link(2) fails on an existing name; rename would replace it
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def exists(self, ref: str) -> bool:
        try:
            return self.path_of(ref).exists()
        except BlobError:
            return False

    def put_file(self, key: str, path: str | Path) -> str:
        ref = self.named_ref(key)
        file = self.path_of(ref)
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f"{file.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            shutil.copyfile(path, tmp)
            os.replace(tmp, file)
        finally:
            tmp.unlink(missing_ok=True)
        return ref

    def get_file(self, ref: str, dest: str | Path) -> None:
        try:
            shutil.copyfile(self.path_of(ref), dest)
        except FileNotFoundError:
            raise BlobError(f"blob not found: {ref}") from None

    def list_named(self, prefix: str) -> list[str]:
        root = self.path_of(self.named_ref("x")).parent
        base = self.path_of(self.named_ref(prefix))
        return sorted(str(f.relative_to(root)) for f in base.rglob("*") if f.is_file() and ".tmp-" not in f.name)

    def delete(self, ref: str) -> None:
        self.path_of(ref).unlink(missing_ok=True)


LocalBlobStore = BlobStore


def s3_client_kwargs(env: Mapping[str, str] | None = None) -> dict:
    """boto3.client("s3", **kwargs) settings from the standard AWS variables (as stores/blobstore-s3.ts):
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN; without them boto3's own chain),
    AWS_REGION or AWS_DEFAULT_REGION (default us-east-1), AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL
    (a non-AWS endpoint is addressed path-style, checksums only where required)."""
    from botocore.config import Config

    env = os.environ if env is None else env
    kwargs: dict = {"region_name": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"}
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        kwargs.update(
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
        )
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    config: dict = {"retries": {"max_attempts": 3, "mode": "standard"}, "connect_timeout": 10}
    if endpoint:
        host = urlsplit(endpoint).hostname
        if not host:
            raise BlobError(f"bad S3 endpoint {endpoint!r} (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL): not a URL")
        kwargs["endpoint_url"] = endpoint
        if not re.search(r"(^|\.)amazonaws\.com(\.cn)?$", host):
            config.update(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
    kwargs["config"] = Config(**config)
    return kwargs


def _s3_code(err: Exception) -> tuple[str, int | None]:
    resp = getattr(err, "response", None) or {}
    return str(resp.get("Error", {}).get("Code", "")), resp.get("ResponseMetadata", {}).get("HTTPStatusCode")


class S3BlobStore(BlobStoreBase):
    """The blob store on S3 or an S3-compatible server: a ref's path is the object key under the prefix."""

    def __init__(self, bucket: str, prefix: str = "", *, env: Mapping[str, str] | None = None, client=None):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        if client is None:
            import boto3

            client = boto3.client("s3", **s3_client_kwargs(env))
        self.client = client

    def key_of(self, ref: str) -> str:
        rel = ref_path(ref)
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _failure(self, err: Exception, ref: str) -> Exception:
        code, _ = _s3_code(err)
        if code == "NoSuchBucket":
            return BlobError(f"blob store {self.uri}: bucket {self.bucket!r} does not exist (reading or writing {ref})")
        return err

    def _has(self, key: str, ref: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except ClientError as err:
            code, status = _s3_code(err)
            if status == 404 or code in ("404", "NotFound", "NoSuchKey"):
                return False  # a HEAD has no body: a missing bucket answers 404 like a missing key
            raise self._failure(err, ref) from err

    def _put(self, key: str, ref: str, body: bytes, content_type: str, **extra) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, **extra)
        except ClientError as err:
            failure = self._failure(err, ref)
            if failure is err:
                raise
            raise failure from err

    def get_bytes(self, ref: str) -> bytes:
        from botocore.exceptions import ClientError

        key = self.key_of(ref)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as err:
            code, status = _s3_code(err)
            if code == "NoSuchKey" or (status == 404 and code != "NoSuchBucket"):
                raise BlobError(f"blob not found: {ref}") from None
            failure = self._failure(err, ref)
            if failure is err:
                raise
            raise failure from err

    def put_bytes(self, data: bytes, ext: str = "bin") -> str:
        data = bytes(data)
        ref = _cas_ref(data, ext)
        key = self.key_of(ref)
        if not self._has(key, ref):  # stored once; racing writers upload identical bytes
            self._put(key, ref, data, "application/octet-stream")
        return ref

    def put_json(self, key: str, value: Any) -> str:
        ref = self.named_ref(key)
        self._put(self.key_of(ref), ref, _json_bytes(key, value), "application/json")
        return ref

    def put_json_if_absent(self, key: str, value: Any) -> bool:
        from botocore.exceptions import ClientError

        ref = self.named_ref(key)
        object_key, body = self.key_of(ref), _json_bytes(key, value)
        for attempt in range(6):
            try:
                self._put(object_key, ref, body, "application/json", IfNoneMatch="*")
                return True
            except ClientError as err:
                code, status = _s3_code(err)
                if status == 412 or code == "PreconditionFailed":
                    return False
                if (status == 409 or code == "ConditionalRequestConflict") and attempt < 5:
                    time.sleep(0.05 * 2**attempt)  # a concurrent write or delete: AWS says retry
                    continue
                if status == 501 or code == "NotImplemented":
                    raise BlobError(
                        f"blob store {self.uri}: the endpoint does not support conditional writes "
                        f"(PUT with If-None-Match: *), needed for {ref}"
                    ) from None
                raise
        raise AssertionError("unreachable")

    def exists(self, ref: str) -> bool:
        try:
            key = self.key_of(ref)
        except BlobError:
            return False
        return self._has(key, ref)

    def put_file(self, key: str, path: str | Path) -> str:
        from botocore.exceptions import ClientError

        ref = self.named_ref(key)
        try:
            self.client.upload_file(str(path), self.bucket, self.key_of(ref))
        except ClientError as err:
            failure = self._failure(err, ref)
            if failure is err:
                raise
            raise failure from err
        return ref

    def get_file(self, ref: str, dest: str | Path) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.download_file(self.bucket, self.key_of(ref), str(dest))
        except ClientError as err:
            code, status = _s3_code(err)
            if code in ("NoSuchKey", "404") or (status == 404 and code != "NoSuchBucket"):
                raise BlobError(f"blob not found: {ref}") from None
            failure = self._failure(err, ref)
            if failure is err:
                raise
            raise failure from err

    def list_named(self, prefix: str) -> list[str]:
        root = self.key_of(self.named_ref("x"))[:-1]
        keys: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.key_of(self.named_ref(prefix)) + "/"
        )
        for page in pages:
            keys += [o["Key"][len(root) :] for o in page.get("Contents", [])]
        return sorted(keys)

    def delete(self, ref: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.key_of(ref))

    def close(self) -> None:
        self.client.close()


def open_blob_store(uri: str, *, env: Mapping[str, str] | None = None) -> BlobStoreBase:
    """Opens the store a URI names: `s3://bucket[/prefix]`, `file:///path` or a path."""
    kind, where, prefix = parse_blob_store_uri(uri)
    if kind == "local":
        return BlobStore(where)
    return S3BlobStore(where, prefix, env=env)
