"""Fixtures of the Python package's tests (run by scripts/test.sh through
scripts/test-python.sh, against a wheel built and installed in a venv)."""

import os
import pathlib

import pytest

import cairn


@pytest.fixture
def path(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "db")


@pytest.fixture
def db(path: str):
    with cairn.Db(path, shards=4) as d:
        yield d


def cairn_bin() -> pathlib.Path:
    """The `cairn` command-line tool (the Rust side of the interoperability tests)."""
    if os.environ.get("CAIRN_BIN"):
        return pathlib.Path(os.environ["CAIRN_BIN"])
    root = pathlib.Path(__file__).resolve().parents[3]
    # Cargo reads a relative CARGO_TARGET_DIR from where it runs: the repository's root.
    target = root / os.environ.get("CARGO_TARGET_DIR", "target")
    return target / "release" / "cairn"
