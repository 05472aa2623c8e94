"""File objects of the file store against io semantics."""

import io
import os

import pytest

import cairn


def test_write_then_read_seek_readinto(db):
    data = os.urandom(300_000)
    with db.files.create(b"f") as w:
        assert w.writable() and not w.readable()
        for i in range(0, len(data), 7000):
            assert w.write(data[i:i + 7000]) == len(data[i:i + 7000])
        assert w.tell() == len(data)
    assert w.closed and w.stat["size"] == len(data)
    with db.files.open(b"f") as r:
        assert r.readable() and r.seekable() and not r.writable()
        assert r.read(10) == data[:10]
        assert r.tell() == 10
        assert r.seek(-5, io.SEEK_END) == len(data) - 5
        assert r.read() == data[-5:]
        assert r.read(10) == b""  # at the end
        assert r.seek(1000) == 1000
        buf = bytearray(5000)
        assert r.readinto(buf) == 5000 and bytes(buf) == data[1000:6000]
        assert r.seek(100, io.SEEK_CUR) == 6100
        r.seek(len(data) - 3)
        buf = bytearray(10)
        assert r.readinto(buf) == 3 and bytes(buf[:3]) == data[-3:]  # partial read
        r.seek(0)
        assert r.read(-1) == data
        assert r.size == len(data) and r.stat()["size"] == len(data)
    assert r.closed
    with pytest.raises(ValueError):
        r.read(1)


def test_buffered_and_text_wrappers(db):
    db.files.put(b"lines", b"one\ntwo\nthree\n")
    with io.BufferedReader(db.files.open(b"lines")) as r:
        assert list(r) == [b"one\n", b"two\n", b"three\n"]
    with io.TextIOWrapper(io.BufferedReader(db.files.open(b"lines")), encoding="utf-8") as t:
        assert t.readline() == "one\n"
    with io.BufferedWriter(db.files.create(b"buffered")) as w:
        for i in range(1000):
            w.write(b"%d," % i)
    assert db.files.read(b"buffered") == b"".join(b"%d," % i for i in range(1000))


def test_abort_on_exception_and_abort(db):
    db.files.put(b"k", b"old")
    with pytest.raises(RuntimeError):
        with db.files.create(b"k") as w:
            w.write(b"new")
            raise RuntimeError("stop")
    assert db.files.read(b"k") == b"old"
    w = db.files.create(b"k")
    w.write(b"newer")
    w.abort()
    assert w.closed and db.files.read(b"k") == b"old"


def test_reader_keeps_its_version(db):
    db.files.put(b"k", b"A" * 1000)
    r = db.files.open(b"k")
    db.files.put(b"k", b"B" * 10)
    assert db.files.remove(b"k") is True
    assert r.read() == b"A" * 1000
    r.close()


def test_store_operations(db):
    files = db.files
    with pytest.raises(FileNotFoundError):
        files.open(b"missing")
    assert files.read(b"missing") is None and files.stat(b"missing") is None
    st = files.put(b"a/1", b"hello")
    assert st["size"] == 5 and len(st["hash"]) == 64
    key = files.put_content(b"hello")
    assert key == st["hash"] and files.read(key.encode()) == b"hello"
    files.put(b"a/2", b"")
    assert files.keys(b"a/") == [b"a/1", b"a/2"]
    assert b"a/1" in files and files.exists(b"a/2")
    assert files.remove(b"a/1") is True and files.remove(b"a/1") is False
    assert files.stats()["files"] == 2
