"""cairn.Error and its subclasses, one per kind of cairn::Error."""

import os

import pytest

import cairn


def test_hierarchy():
    for name in ["KeyTooLarge", "ValueTooLarge", "StorageFull", "Locked", "Corruption",
                 "FormatError", "KeyExists", "InvalidArgument", "ReadOnly", "Closed", "IoError"]:
        assert issubclass(getattr(cairn, name), cairn.Error)
    assert issubclass(cairn.Error, Exception)


def test_key_too_large(db):
    with pytest.raises(cairn.KeyTooLarge, match="exceeds the limit"):
        db.put(b"k" * (cairn.MAX_KEY_LEN + 1), b"v")
    batch = cairn.WriteBatch().put(b"ok", b"1").put(b"k" * (cairn.MAX_KEY_LEN + 1), b"v")
    with pytest.raises(cairn.KeyTooLarge):
        db.write(batch)
    assert b"ok" not in db


def test_locked(db, path):
    with pytest.raises(cairn.Locked):
        cairn.Db(path)


def test_key_exists_writes_nothing(db):
    db[b"a"] = b"1"
    with pytest.raises(cairn.KeyExists):
        db.write(cairn.WriteBatch().put(b"b", b"2").put_new(b"a", b"3"))
    assert b"b" not in db and db[b"a"] == b"1"


def test_storage_full(path):
    with cairn.Db(path, shards=1, segment_size=64 << 10, max_size=256 << 10) as db:
        with pytest.raises(cairn.StorageFull):
            for i in range(10_000):
                db.put(b"%d" % i, b"x" * 1000)
        db.delete(b"0")  # deletes still work


def test_closed(path):
    db = cairn.Db(path)
    db.close()
    db.close()
    assert db.closed
    for call in [lambda: db.get(b"a"), lambda: db.put(b"a", b"b"), lambda: list(db), db.flush]:
        with pytest.raises(cairn.Closed):
            call()


def test_read_only(path):
    with cairn.Db(path) as db:
        db[b"a"] = b"1"
    with cairn.Db(path, read_only=True) as ro:
        assert ro[b"a"] == b"1"
        with pytest.raises(cairn.ReadOnly):
            ro[b"b"] = b"2"


def test_invalid_arguments(path):
    with pytest.raises(cairn.InvalidArgument):
        cairn.Db(path, shards=0)
    with pytest.raises(ValueError):
        cairn.Db(path, sync="sometimes")


def test_format(tmp_path):
    (tmp_path / "CAIRN").write_bytes(b"not a manifest at all")
    with pytest.raises((cairn.FormatError, cairn.Corruption)):
        cairn.Db(str(tmp_path))


def test_corruption(path):
    with cairn.Db(path, shards=1, background_compaction=False) as db:
        db[b"key"] = b"v" * 1000
    segs = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f.endswith(".seg")]
    assert segs, os.listdir(path)
    for s in segs:
        data = bytearray(open(s, "rb").read())
        i = data.find(b"v" * 100)
        if i >= 0:
            data[i + 50] ^= 0xFF
            open(s, "wb").write(data)
    with cairn.Db(path, shards=1) as db:
        with pytest.raises(cairn.Corruption):
            db.get(b"key")
