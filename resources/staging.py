"""Rows staged on local disk until their commit: what a record too big to hold in memory has
been fetched, validated and audited into, a chunk at a time, and what its commit reads back a
batch at a time (as many times as the commit is tried: a lost race is tried again).

One Arrow IPC file of LZ4-compressed batches in the system's temporary folder (TMPDIR),
deleted once the rows are committed or dropped; it holds the rows as the lake will, sealed
narrations and all, and nothing else. Its process holds a lock on it for as long as it lives:
a file nobody locks is a killed process's, and the next staging sweeps it away.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import tempfile
import time
from collections.abc import Iterator

import pyarrow as pa

OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
PREFIX = "ledgerlake-"
# a file younger than this may be one a process has made and not locked yet
SWEEP_AFTER_S = 60.0


def sweep(folder: str | None = None) -> int:
    """Delete the staged files of processes that died (no lock held on them); how many."""
    gone = 0
    now = time.time()
    for path in glob.glob(os.path.join(folder or tempfile.gettempdir(), f"{PREFIX}*.arrow")):
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to open
            if now - os.stat(path).st_mtime < SWEEP_AFTER_S:
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError while its owner lives
                os.unlink(path)
                gone += 1
            finally:
                os.close(fd)
    return gone


class Staged:
    """Rows of one schema, added table by table, then read back in the order they came."""

    def __init__(self, schema: pa.Schema, prefix: str = PREFIX) -> None:
        if not prefix.startswith(PREFIX):
            raise ValueError(f"a staged file's prefix starts with {PREFIX!r}, for sweep()")
        sweep()
        self.schema = schema
        fd, self.path = tempfile.mkstemp(prefix=prefix, suffix=".arrow")
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until discard(), or the process's end
        self._lock: int | None = fd
        self._sink: pa.NativeFile | None = pa.OSFile(self.path, "wb")
        self._writer: pa.ipc.RecordBatchFileWriter | None = pa.ipc.new_file(
            self._sink, schema, options=OPTIONS)
        self.rows = 0

    def add(self, rows: pa.Table) -> None:
        if self._writer is None:
            raise ValueError("rows are added before they are read")
        if rows.num_rows:
            self._writer.write_table(rows.select(self.schema.names).cast(self.schema))
            self.rows += rows.num_rows

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows added, batch by batch, read from the file (not mapped: a batch read is a
        batch held)."""
        self._seal()
        with pa.OSFile(self.path, "rb") as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    def _seal(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def discard(self) -> None:
        """Delete the file (the rows are committed, or not to be)."""
        self._seal()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __repr__(self) -> str:
        return f"Staged({self.rows} rows)"
