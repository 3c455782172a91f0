"""The Python blob stores (workers/tempo_common/blobs.py) against a real S3-compatible server: S3Proxy with its
filesystem backend, installed and started by testing/s3-server.ts through testing/s3-server-child.ts
(the module fixture starts it and stops it). Where it cannot be installed or run (no network, no Java,
no node) the S3 tests skip, naming what was missing."""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tempo_common.blobs import (
    BlobError,
    BlobStore,
    LocalBlobStore,
    S3BlobStore,
    open_blob_store,
    parse_blob_store_uri,
)

REPO = Path(__file__).resolve().parents[2]
BUCKET = "tempo-test"
BAD_REFS = [
    "named/x.json",
    "blob:../etc/passwd",
    "blob:/etc/passwd",
    "blob:named/../../x",
    "blob:",
    "blob:a\0b",
    "blob:\\x",
    "blob:named/..",
    "blob:.",
]


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


@pytest.fixture(scope="module")
def s3server(tmp_path_factory):
    node = shutil.which("node")
    if node is None:
        pytest.skip("S3 server unavailable: node is not on the PATH (testing/s3-server.ts starts S3Proxy)")
    if not (REPO / "node_modules" / "tsx").is_dir():
        pytest.skip("S3 server unavailable: node_modules/tsx is missing (run scripts/bootstrap.sh)")
    data = tmp_path_factory.mktemp("s3data")
    errlog = tmp_path_factory.mktemp("s3child") / "child.err"
    with open(errlog, "wb") as err:
        child = subprocess.Popen(
            [node, "--import", "tsx", "testing/s3-server-child.ts", str(data), BUCKET],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
    info = None
    try:
        deadline = time.monotonic() + 600  # a first run downloads the 55 MB jar
        line = b""
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            ready, _, _ = select.select([child.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(child.stdout.fileno(), 65536)
                if not chunk:
                    break
                line += chunk
        if not line.strip():
            raise RuntimeError(
                f"the S3 server helper gave no answer (exit {child.poll()}): {errlog.read_text()[-3000:]}"
            )
        info = json.loads(line.decode().strip().splitlines()[0])
        if "unavailable" in info:
            pytest.skip(f"S3 server unavailable: {info['unavailable']}")
        info["data_dir"] = str(data)
        print(
            f"S3Proxy {info['version']} on {info['endpoint']} (Java {info['java_major']}; install "
            f"{'downloaded in %d ms' % info['install']['ms'] if info['install']['downloaded'] else 'cached'}; "
            f"healthy after {info['start_ms']} ms)"
        )
        yield info
    finally:
        # Closing stdin asks the helper to stop the server and exit; then make sure of both.
        try:
            child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        if info and "pid" in info:
            group = info["pid"]  # the Java process leads the server's process group
            for _ in range(100):
                if not _group_members(group):
                    break
                time.sleep(0.1)
            else:
                os.killpg(group, signal.SIGKILL)
                pytest.fail(f"S3Proxy's process group {group} outlived its helper")


@pytest.fixture
def env(s3server):
    return dict(s3server["env"])


def store_at(env, prefix="runs/r1") -> S3BlobStore:
    store = open_blob_store(f"s3://{BUCKET}/{prefix}" if prefix else f"s3://{BUCKET}", env=env)
    assert isinstance(store, S3BlobStore)
    return store


def test_bytes_round_trip_content_addressed_under_the_prefix(s3server, env):
    store = store_at(env)
    assert store.uri == f"s3://{BUCKET}/runs/r1"
    data = b"a diagram, say"
    digest = hashlib.sha256(data).hexdigest()
    ref = store.put_bytes(data, "png")
    assert ref == f"blob:cas/{digest[:2]}/{digest}.png"
    assert store.get_bytes(ref) == data
    assert store.exists(ref)
    assert store.key_of(ref) == f"runs/r1/cas/{digest[:2]}/{digest}.png"
    # On the server's disk, as the filesystem backend keeps it.
    assert (Path(s3server["data_dir"]) / BUCKET / "runs/r1/cas" / digest[:2] / f"{digest}.png").read_bytes() == data
    binary = bytes((i * 131) % 256 for i in range(70_000))
    assert store.get_bytes(store.put_bytes(binary)) == binary
    assert store.get_bytes(store.put_bytes(b"")) == b""


def test_same_bytes_same_ref_stored_once_and_same_as_local(env, tmp_path):
    store = store_at(env, "py-cas-once")
    puts = []
    store.client.meta.events.register("before-call.s3.PutObject", lambda **kw: puts.append(1))
    data = b"one image used by 8 samples"
    refs = {store.put_bytes(data, "png") for _ in range(8)}
    assert len(refs) == 1 and len(puts) == 1
    listed = store.client.list_objects_v2(Bucket=BUCKET, Prefix="py-cas-once/")
    assert listed["KeyCount"] == 1
    assert BlobStore(tmp_path).put_bytes(data, "png") == refs.pop()


def test_named_json_round_trip_and_overwrite(env):
    store = store_at(env)
    value = {"step": 3, "text": "ü → ∠ABC = 40°", "nested": [1, None, {"a": True}]}
    ref = store.put_json("samples/r1/3/0.json", value)
    assert ref == "blob:named/samples/r1/3/0.json" == store.named_ref("samples/r1/3/0.json")
    assert store.get_json(ref) == value
    # The same text TypeScript's JSON.stringify writes.
    assert store.get_bytes(ref) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    store.put_json("samples/r1/3/0.json", {"replaced": True})
    assert store.get_json(ref) == {"replaced": True}
    assert store.key_of("blob:named/samples/./r1//x/../3/0.json") == "runs/r1/named/samples/r1/3/0.json"
    with pytest.raises(BlobError):
        store.put_json("nan.json", float("nan"))


def test_missing_blob_and_missing_bucket(env):
    store = store_at(env)
    with pytest.raises(BlobError, match=r"^blob not found: blob:named/missing\.json$"):
        store.get_bytes("blob:named/missing.json")
    with pytest.raises(BlobError, match="blob not found"):
        store.get_json("blob:named/missing.json")
    assert not store.exists("blob:named/missing.json")
    nobucket = open_blob_store("s3://no-such-bucket/p", env=env)
    with pytest.raises(BlobError, match="bucket 'no-such-bucket' does not exist"):
        nobucket.get_bytes("blob:named/x.json")
    with pytest.raises(BlobError, match="no-such-bucket"):
        nobucket.put_json("x.json", 1)


def test_not_json(env):
    store = store_at(env)
    ref = store.put_bytes(b"{not json", "json")
    with pytest.raises(BlobError, match="is not valid JSON"):
        store.get_json(ref)


def test_escapes_refused_like_the_local_store(env, tmp_path):
    store = store_at(env)
    local = BlobStore(tmp_path)
    for bad in BAD_REFS:
        with pytest.raises(BlobError):
            store.key_of(bad)
        with pytest.raises(BlobError):
            store.get_bytes(bad)
        assert store.exists(bad) is False
        assert local.exists(bad) is False
        with pytest.raises(BlobError):
            local.path_of(bad)
    with pytest.raises(BlobError):
        store.put_json("../../outside.json", {})
    with pytest.raises(BlobError):
        store.put_bytes(b"x", "/../../../../escape")
    assert store.client.list_objects_v2(Bucket=BUCKET, Prefix="outside")["KeyCount"] == 0


def test_wrong_credentials_fail_loudly(env):
    store = store_at(env | {"AWS_SECRET_ACCESS_KEY": "wrong"})
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="403|Forbidden|Signature|Access"):
        store.exists("blob:named/x.json")
    with pytest.raises(ClientError):
        store.get_bytes("blob:named/x.json")


@pytest.mark.parametrize("kind", ["s3", "local"])
def test_put_json_if_absent_one_winner(kind, request, tmp_path):
    store = store_at(request.getfixturevalue("env"), "py-commit") if kind == "s3" else BlobStore(tmp_path)
    for round_ in range(3):
        key = f"checkpoints/step-{round_}/COMMIT.json"
        barrier = threading.Barrier(8)

        def claim(i):
            barrier.wait()
            return store.put_json_if_absent(key, {"attempt": i, "pad": "x" * 50_000})

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(claim, range(8)))
        assert results.count(True) == 1, results
        assert store.get_json(store.named_ref(key))["attempt"] == results.index(True)
        assert store.put_json_if_absent(key, {"late": True}) is False


def test_local_store_new_methods_keep_the_layout(tmp_path):
    store = LocalBlobStore(tmp_path)
    ref = store.put_bytes(b"abc", "png")
    digest = hashlib.sha256(b"abc").hexdigest()
    assert (tmp_path / "cas" / digest[:2] / f"{digest}.png").read_bytes() == b"abc"
    assert store.put_json("a/b.json", {"x": 1}) == "blob:named/a/b.json"
    assert (tmp_path / "named" / "a" / "b.json").read_text() == '{"x":1}'
    assert store.exists(ref) and not store.exists("blob:named/none.json")
    assert sorted(p.name for p in tmp_path.rglob("*.tmp-*")) == []
    assert store.uri == tmp_path.resolve().as_uri()
    assert isinstance(open_blob_store(store.uri), BlobStore)
    assert open_blob_store(store.uri).root == tmp_path.resolve()
    assert open_blob_store(str(tmp_path)).root == tmp_path.resolve()
    for uri in ("s3://bucket/p", store.uri):
        with pytest.raises(BlobError, match="open_blob_store"):
            BlobStore(uri)


@pytest.mark.parametrize(
    "uri,why",
    [
        ("", "empty"),
        ("s3://", "no bucket"),
        ("s3:bucket/x", "not of the form s3://bucket/prefix"),
        ("s3://Bad_Bucket/x", "not a valid S3 bucket name"),
        ("s3://ab/x", "not a valid S3 bucket name"),
        ("s3://192.168.1.1/x", "not a valid S3 bucket name"),
        ("s3://key:secret@bucket/x", "credentials or a port"),
        ("s3://bucket/a/../b", '".." segment'),
        ("s3://bucket/a//b", "empty"),
        ("s3://bucket/x?endpoint=http://h", "query or fragment"),
        ("gs://bucket/x", 'unsupported scheme "gs:"'),
        ("http://127.0.0.1:9000/bucket", 'unsupported scheme "http:"'),
        ("file://otherhost/x", "not a local file URL"),
        ("file:relative", "not a local file URL"),
        ("file:///tmp/x?y=1", "not a local file URL"),
        ("/tmp/a\0b", "NUL"),
        (42, "must be a string"),
    ],
)
def test_bad_uri_names_the_value(uri, why):
    with pytest.raises(BlobError) as err:
        open_blob_store(uri)
    shown = json.dumps(uri) if isinstance(uri, str) else repr(uri)
    assert str(err.value).startswith(f"bad blob store URI {shown}: ")
    assert why in str(err.value)


def test_good_uris():
    assert parse_blob_store_uri("s3://bucket-1/a/b/") == ("s3", "bucket-1", "a/b")
    assert parse_blob_store_uri("s3://bucket.example") == ("s3", "bucket.example", "")
    assert parse_blob_store_uri("file://localhost/tmp/x") == ("local", "/tmp/x", "")
    assert parse_blob_store_uri("relative/blobs") == ("local", str(Path("relative/blobs").resolve()), "")
    store = open_blob_store(
        "s3://bucket-1//a/b/",
        env={"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
    )
    assert isinstance(store, S3BlobStore) and store.uri == "s3://bucket-1/a/b"


def test_the_trainer_reads_samples_and_images_from_s3_and_commits_its_checkpoint_there(
    env, samples, mixed_refs, make_input, blob_dir, tmp_path, monkeypatch
):
    """A train step whose blob_store is s3://…: the samples (two with images) are only in S3 — the local
    copies they were made from are gone — and the checkpoint is committed in S3 (trainer/stores/checkpoints.py),
    with run_dir as the trainer's local copy."""
    from trainer.contract import TrainStepInput
    from trainer.step.train_step import Trainer

    uri = f"s3://{BUCKET}/trainer-step"
    s3 = open_blob_store(uri, env=env)
    try:
        for path in sorted(p for p in blob_dir.rglob("*") if p.is_file()):
            rel = path.relative_to(blob_dir).as_posix()
            if rel.startswith("cas/"):
                assert s3.put_bytes(path.read_bytes(), path.suffix[1:]) == f"blob:{rel}"
            else:
                assert s3.put_json(rel[len("named/") :], json.loads(path.read_text())) == f"blob:{rel}"
    finally:
        s3.close()
    shutil.rmtree(blob_dir)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    payload = {**make_input(mixed_refs), "blob_store": uri}
    out = Trainer().train_step(TrainStepInput.model_validate(payload))
    assert out.weight_version == 1 and out.metrics["train/n_samples"] == 4
    assert Path(out.checkpoint).is_dir() and Path(out.checkpoint).is_relative_to(tmp_path / "run")
    s3 = open_blob_store(uri, env=env)
    try:
        record = s3.get_json(s3.named_ref("runs/r/checkpoints/step-000000/COMMIT.json"))
    finally:
        s3.close()
    assert record["attempt"] == json.loads((Path(out.checkpoint) / "meta.json").read_text())["attempt"]
