"""A store written from Python is read by the Rust side (the `cairn` tool, built on the
engine's Rust API), and the other way round."""

import os
import subprocess

import pytest

import cairn
from conftest import cairn_bin


def tool(path, *args, stdin=None):
    return subprocess.run([str(cairn_bin()), "--db", path, *args], input=stdin,
                          capture_output=True, check=True).stdout


@pytest.fixture(autouse=True)
def need_tool():
    if not cairn_bin().exists():
        pytest.skip(f"{cairn_bin()} not built (cargo build --release -p cairn-cli)")


def test_python_writes_rust_reads(path):
    values = {b"k%d" % i: os.urandom(50 + i) for i in range(20)}
    with cairn.Db(path) as db:
        for k, v in values.items():
            db.put(k, v)
        db.delete(b"k3")
    for k, v in values.items():
        if k == b"k3":
            continue
        assert tool(path, "get", k.decode()) == v
    assert b"k3" not in tool(path, "scan")


def test_rust_writes_python_reads(path):
    value = os.urandom(5000)
    tool(path, "put", "from-rust", "-", stdin=value)
    tool(path, "put", "other", "x")
    tool(path, "del", "other")
    with cairn.Db(path) as db:
        assert db[b"from-rust"] == value
        assert b"other" not in db
