"""Rows staged on local disk until their commit: what a record too big to hold in memory has
been fetched, validated and audited into, a chunk at a time, and what its commit reads back a
batch at a time (as many times as the commit is tried: a lost race is tried again).

One Arrow IPC file of LZ4-compressed batches in the system's temporary folder (TMPDIR),
deleted once the rows are committed or dropped; it holds the rows as the lake will, sealed
narrations and all, and nothing else. A process killed in between leaves it there.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pyarrow as pa

OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


class Staged:
    """Rows of one schema, added table by table, then read back in the order they came."""

    def __init__(self, schema: pa.Schema, prefix: str = "ledgerlake-") -> None:
        self.schema = schema
        fd, self.path = tempfile.mkstemp(prefix=prefix, suffix=".arrow")
        os.close(fd)
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

    def __repr__(self) -> str:
        return f"Staged({self.rows} rows)"
