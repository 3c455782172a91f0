import json
from pathlib import Path

import pytest

from tempo_common.blobs import BlobError, BlobStore, parse_blob_store_uri


def test_resolves_and_refuses_escapes(tmp_path):
    store = BlobStore(tmp_path)
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "x.json").write_text('{"a": 1}')
    assert store.get_json("blob:named/x.json") == {"a": 1}
    for bad in ["named/x.json", "blob:../etc/passwd", "blob:/etc/passwd", "blob:named/../../x", "blob:", "blob:a\0b"]:
        with pytest.raises(BlobError):
            store.path_of(bad)
    with pytest.raises(BlobError, match="not found"):
        store.get_bytes("blob:named/missing.json")


# The blob store URIs both sides refuse (stores/blobstore.ts BlobStoreUri; tests/ts/bad-input.test.ts runs
# these through both parsers), each named in the message with the reason.
@pytest.mark.parametrize(
    "uri, why",
    [
        ("/proc/x", "virtual filesystem"),
        ("file:///sys/x", "virtual filesystem"),
        ("   ", "blank"),
        (" /tmp/b", "whitespace"),
        ("/tmp/b\t", "whitespace"),
        ("file:///tmp/a%00b", "NUL"),
        ("file:///tmp/a%0Ab", "control character"),
        ("/tmp/a\x07b", "control character"),
        ("~other/b", "another user's home"),
    ],
)
def test_a_store_uri_nobody_means_is_refused_naming_it(uri, why):
    with pytest.raises(BlobError) as err:
        parse_blob_store_uri(uri)
    assert str(err.value).startswith(f"bad blob store URI {json.dumps(uri)}: ")
    assert why in str(err.value)


def test_a_leading_tilde_is_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_blob_store_uri("~/blobs") == ("local", str(tmp_path / "blobs"), "")
    assert parse_blob_store_uri("~") == ("local", str(tmp_path), "")
    assert parse_blob_store_uri("file:///tmp/~/x") == ("local", str(Path("/tmp/~/x").resolve()), "")
