"""cairn: an embedded log-structured key-value store, and a file store on it.

>>> import cairn, tempfile
>>> with cairn.Db(tempfile.mkdtemp()) as db:
...     db[b"user:1"] = b"ada"
...     db.put(b"user:2", b"grace")
...     [k for k, v in db.prefix(b"user:")]
[b'user:1', b'user:2']

Keys and values are bytes-like; every call that touches the disk releases the GIL.
Errors are subclasses of `cairn.Error`.
"""

from __future__ import annotations

import io
from typing import Any, Dict, List, Optional

from . import _cairn
from ._cairn import (
    MAX_KEY_LEN,
    MAX_VALUE_LEN,
    Closed,
    Conflict,
    Corruption,
    Error,
    FormatError,
    Iter,
    InvalidArgument,
    IoError,
    KeyExists,
    Keyspace,
    KeyTooLarge,
    Locked,
    ReadOnly,
    Snapshot,
    StorageFull,
    Transaction,
    ValueTooLarge,
    WriteBatch,
    __version__,
)

__all__ = [
    "Db", "Keyspace", "Snapshot", "Transaction", "WriteBatch", "Iter",
    "FileStore", "FileWriter", "FileReader",
    "Error", "KeyTooLarge", "ValueTooLarge", "StorageFull", "Locked", "Corruption",
    "FormatError", "KeyExists", "InvalidArgument", "ReadOnly", "Closed", "Conflict", "IoError",
    "MAX_KEY_LEN", "MAX_VALUE_LEN", "__version__",
]


class FileWriter(io.RawIOBase):
    """A new version of a file, written in a stream: `write`, then `close` commits it
    atomically (its stat is then in `.stat`). Leaving a `with` block by an exception
    aborts it instead: nothing of it becomes visible."""

    def __init__(self, raw: _cairn.RawWriter, key: bytes) -> None:
        super().__init__()
        self._raw = raw
        self.name = key
        self.stat: Optional[Dict[str, Any]] = None

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("I/O operation on closed file")
        return self._raw.write(b)

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        if not self.closed:
            try:
                self.stat = self._raw.commit()
            finally:
                super().close()

    def abort(self) -> None:
        """Drops what was written and closes the writer."""
        if not self.closed:
            self._raw.abort()
            super().close()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


class FileReader(io.RawIOBase):
    """A committed version of a file, readable and seekable (`read`, `readinto`,
    `seek`, `tell`, iteration by lines through `io.BufferedReader`); it keeps reading
    the version it opened even if the key is overwritten or removed meanwhile."""

    def __init__(self, raw: _cairn.RawReader, key: bytes) -> None:
        super().__init__()
        self._raw = raw
        self.name = key

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    @property
    def size(self) -> int:
        return self._raw.size

    def stat(self) -> Dict[str, Any]:
        return self._raw.stat()

    def read(self, size: Optional[int] = -1) -> bytes:
        self._check()
        if size is None or size < 0:
            return self.readall()
        return self._raw.read(size)

    def readall(self) -> bytes:
        self._check()
        return self._raw.read(max(self._raw.size - self._raw.tell(), 0))

    def readinto(self, b: Any) -> int:
        self._check()
        view = memoryview(b).cast("B")
        data = self._raw.read(len(view))
        view[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check()
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        self._check()
        return self._raw.tell()

    def _check(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")


class FileStore:
    """The file store of a `Db` (`db.files`): files of any size under byte-string keys."""

    def __init__(self, raw: _cairn.FileStore) -> None:
        self._raw = raw

    def create(self, key: bytes) -> FileWriter:
        """A writable binary file object for a new version of `key`."""
        return FileWriter(self._raw.create_raw(key), bytes(key))

    def open(self, key: bytes) -> FileReader:
        """A readable, seekable binary file object; `FileNotFoundError` if none."""
        return FileReader(self._raw.open_raw(key), bytes(key))

    def put(self, key: bytes, data: bytes) -> Dict[str, Any]:
        """Stores `data` as the file `key` atomically; returns its stat."""
        return self._raw.put(key, data)

    def put_content(self, data: bytes) -> str:
        """Stores `data` under the hex BLAKE3 hash of its content; returns that key."""
        return self._raw.put_content(data)

    def read(self, key: bytes) -> Optional[bytes]:
        """The whole content of `key`, or None."""
        return self._raw.read(key)

    def stat(self, key: bytes) -> Optional[Dict[str, Any]]:
        """size, chunks, chunk_size, hash, created, version of `key`, or None."""
        return self._raw.stat(key)

    def exists(self, key: bytes) -> bool:
        return self._raw.exists(key)

    def remove(self, key: bytes) -> bool:
        """Removes `key`; returns whether it existed."""
        return self._raw.remove(key)

    def keys(self, prefix: Optional[bytes] = None) -> List[bytes]:
        """The file keys starting with `prefix`, in order."""
        return self._raw.keys(prefix)

    def stats(self) -> Dict[str, Any]:
        """Totals of the file store."""
        return self._raw.stats()

    def __contains__(self, key: bytes) -> bool:
        return self._raw.exists(key)


class Db(_cairn.Db):
    """A cairn store open on a directory (created if missing); a context manager.

    Options (keywords): shards, segment_size, sync ('never', 'always' or an interval in
    seconds), max_size, background_compaction, compaction_threshold, read_only.
    Keyspace 0 is the Db's own: `get`, `put`, `put_new`, `delete`, `write`, `range`,
    `prefix`, iteration of (key, value) pairs, and the mapping operators; `snapshot()`
    (the store as it is now, read while writes go on), `transaction()` (optimistic,
    committed only if nothing it read changed: else `Conflict`) and `transact(fn)`."""

    @property
    def files(self) -> FileStore:  # type: ignore[override]
        """The file store (keyspace 1)."""
        return FileStore(_cairn.Db.files.__get__(self))
