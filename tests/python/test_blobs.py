import pytest

from trainer.blobs import BlobError, BlobStore


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
