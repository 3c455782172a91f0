"""Checkpoints in a remote blob store (S3): committed with no rename, readable from any host.

With an `s3://` store (tempo_common/blob_uri.py) the store, not the trainer's disk, is where a step is committed:

    runs/<run>/checkpoints/step-<N>/attempts/<token>/<file>   one attempt's files, uploaded first
    runs/<run>/checkpoints/step-<N>/COMMIT.json               the commit record: written last, only if absent
    runs/<run>/weights/step-<N>/…                             a light step's engine weights, the same way

(all as `blob:named/` keys, so under `<prefix>/named/` on S3). COMMIT.json is checkpoint/atomic.py's meta.json
plus the attempt's key prefix and each file's SHA-256. Of two attempts of step N (a timed-out one still
running beside its retry, on this host or another), the conditional put (`If-None-Match: *`) lets exactly
one commit; the other deletes its own uploads and takes the winner's record. Readers trust records only,
and check sizes and digests of what they download.

The trainer still works on a local directory, its scratch run_dir: checkpoint/atomic.py writes an attempt there
as before, `publish` commits it to the store, and only the winner's copy is renamed into place locally. A
trainer on a fresh host (or one that another host overtook) first `hydrate`s: the records of the newest
full step and of every light step after it, and that full step's files. The local copy is a cache.

Pruning (run.keep_checkpoints) marks a record `"pruned": true` before it deletes the files: the record
stays, so the step still counts as committed and a late attempt's conditional put still fails.

The record's name and the checked download are tempo_common/commit_records.py's, which engines read too
(tempo_engine/weights_from_store.py) without importing the trainer. A step's store location is
`<store URI>/named/runs/<run>/<kind>/step-<N>` (`location`), which is what train_step returns and what
the workflow's history carries."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

from tempo_common.blobs import BlobError, BlobStoreBase
from tempo_common.commit_records import COMMIT, download, sha256_of

from ..checkpoint import atomic as ckpt

KINDS = ("checkpoints", "weights")
_LOCATION = re.compile(r"^(?P<store>.+)/named/runs/(?P<run>[^/]+)/(?P<kind>checkpoints|weights)/step-(?P<step>\d{6,})$")


def is_location(text: str) -> bool:
    return _LOCATION.match(text) is not None


def parse_location(text: str) -> tuple[str, str, str, int]:
    """(store URI, run id, kind, step) of a stored step's location; BlobError naming it otherwise."""
    m = _LOCATION.match(text)
    if m is None:
        raise BlobError(
            f"not a stored checkpoint location: {text!r} (<store>/named/runs/<run>/checkpoints|weights/step-NNNNNN)"
        )
    return m["store"], m["run"], m["kind"], int(m["step"])


def step_key(run_id: str, kind: str, step: int) -> str:
    """The named key of a run's stored step (`kind`: checkpoints or weights)."""
    return f"runs/{run_id}/{kind}/step-{step:06d}"


def store_and_key(text: str) -> tuple[str, str]:
    """(store URI, named key) of a stored step's location: what an engine pulls (tempo_engine/weights_from_store.py)."""
    store, run_id, kind, step = parse_location(text)
    return store, step_key(run_id, kind, step)


class StoredRun:
    """One run's checkpoints in a remote store, mirrored into the local scratch `run_dir`."""

    def __init__(self, store: BlobStoreBase, run_id: str, run_dir: str | Path):
        self.store, self.run_id, self.run_dir = store, run_id, Path(run_dir)
        self._settled: set[int] = set()  # steps known light or pruned: prune() reads their records no more

    def key(self, kind: str, step: int) -> str:
        return step_key(self.run_id, kind, step)

    def location(self, kind: str, step: int) -> str:
        return f"{self.store.uri}/named/{self.key(kind, step)}"

    def location_of(self, local: str | Path) -> str:
        """The store location of a local checkpoint or weights directory of this run."""
        path = Path(local)
        if path.parent.name not in KINDS or path.parent.parent != self.run_dir:
            raise BlobError(f"{path} is not a checkpoint of {self.run_dir}")
        return self.location(path.parent.name, int(path.name[len("step-") :]))

    def record(self, kind: str, step: int) -> dict | None:
        try:
            return self.store.get_json(self.store.named_ref(f"{self.key(kind, step)}/{COMMIT}"))
        except BlobError as err:
            if str(err).startswith("blob not found"):
                return None
            raise

    def publish(self, kind: str, step: int, local: Path, meta: dict) -> dict:
        """Uploads an attempt's files, then its record if none is there: the record that won (this one
        when its `attempt` is meta's)."""
        prefix = f"{self.key(kind, step)}/attempts/{meta['attempt']}"
        digests = {}
        for name in meta["files"]:
            self.store.put_file(f"{prefix}/{name}", local / name)
            digests[name] = sha256_of(local / name)
        record = {**meta, "prefix": prefix, "digests": digests}
        if self.store.put_json_if_absent(f"{self.key(kind, step)}/{COMMIT}", record):
            return record
        for name in meta["files"]:  # lost: only this attempt's own uploads go
            self.store.delete(self.store.named_ref(f"{prefix}/{name}"))
        won = self.record(kind, step)
        if won is None:
            raise ckpt.CheckpointCorrupt(
                f"{self.location(kind, step)}: the conditional put failed but no record is there"
            )
        return won

    def committed_steps(self) -> list[int]:
        steps = []
        for key in self.store.list_named(f"runs/{self.run_id}/checkpoints"):
            parts = key.split("/")
            if len(parts) == 5 and parts[4] == COMMIT and parts[3].startswith("step-"):
                steps.append(int(parts[3][len("step-") :]))
        return sorted(steps)

    def hydrate(self, upto: int) -> None:
        """Brings the local run_dir up to the store for the steps ≤ upto that replay needs: the newest full
        step (with its files, unless pruned) and every light step after it."""
        for step in sorted((s for s in self.committed_steps() if s <= upto), reverse=True):
            path = ckpt.checkpoint_dir(self.run_dir, step)
            if not ckpt.is_committed(path):
                record = self.record("checkpoints", step)
                if record is None:
                    raise ckpt.CheckpointCorrupt(f"{self.location('checkpoints', step)} was listed but has no record")
                self.materialize(step, record)
            if ckpt.is_full(path):
                return

    def materialize(self, step: int, record: dict) -> Path:
        """The local copy of a committed step: its files (a full, unpruned step) and meta.json, renamed in whole."""
        final = ckpt.checkpoint_dir(self.run_dir, step)
        if ckpt.is_committed(final):
            return final
        tmp = ckpt.temporary_dir(self.run_dir, step, f"pull-{uuid.uuid4().hex}")
        tmp.mkdir(parents=True)
        try:
            meta = {k: v for k, v in record.items() if k not in ("prefix", "digests", "pruned")}
            if record.get("pruned"):
                (tmp / ckpt.PRUNED).write_text("weights and optimizer state removed (run.keep_checkpoints)\n")
            elif record.get("full", True):
                download(self.store, record, tmp, list(record["files"]))
            ckpt.write_meta(tmp, meta)
            os.rename(tmp, final)
        except OSError:
            if not ckpt.is_committed(final):
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def drop_weights_before(self, step: int) -> None:
        """Light steps' engine weights older than `step` (derived data: a sync of an older version, which
        the workflow never asks for again, would export them anew)."""
        old = [
            k
            for k in self.store.list_named(f"runs/{self.run_id}/weights")
            if k.split("/")[3].startswith("step-") and int(k.split("/")[3][len("step-") :]) < step
        ]
        for key in sorted(old, key=lambda k: k.endswith(f"/{COMMIT}")):  # the records last
            self.store.delete(self.store.named_ref(key))

    def prune(self, keep: int, keep_every: int = 0) -> list[int]:
        """run.keep_checkpoints in the store: all but the newest `keep` full steps (and those with
        (N + 1) a multiple of keep_every) lose their files; their records stay, marked pruned."""
        if keep <= 0:
            return []
        full = []
        for step in self.committed_steps():
            if step in self._settled:
                continue
            record = self.record("checkpoints", step)
            if record is None or not record.get("full", True) or record.get("pruned"):
                self._settled.add(step)
            else:
                full.append((step, record))
        pruned = []
        for step, record in full[:-keep]:
            if keep_every > 0 and (step + 1) % keep_every == 0:
                self._settled.add(step)
                continue
            self.store.put_json(f"{self.key('checkpoints', step)}/{COMMIT}", {**record, "pruned": True})
            for name in record["files"]:
                self.store.delete(self.store.named_ref(f"{record['prefix']}/{name}"))
            self._settled.add(step)
            pruned.append(step)
        return pruned


def engine_weights_location(trainer, stored: StoredRun, step: int, progress) -> str:
    """Where engines pull step N's weights from: the checkpoint itself when it is full; a light step's
    weights are exported once (trainer.engine_weights, replaying if need be) and published beside it."""
    stored.hydrate(step)
    local = ckpt.checkpoint_dir(stored.run_dir, step)
    if not ckpt.is_committed(local):
        raise ckpt.CheckpointMissing(f"{stored.location('checkpoints', step)} is not committed")
    if ckpt.is_pruned(local):
        raise ckpt.CheckpointPruned(
            f"{stored.location('checkpoints', step)}: its weights were pruned (run.keep_checkpoints)"
        )
    if ckpt.is_full(local):
        return stored.location("checkpoints", step)
    if stored.record("weights", step) is None:
        weights = Path(trainer.engine_weights(str(local), progress))
        stored.publish(
            "weights", step, weights, {"attempt": uuid.uuid4().hex, "step": step, "files": ckpt.manifest(weights)}
        )
        stored.drop_weights_before(step - 1)
    return stored.location("weights", step)
