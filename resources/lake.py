"""The Parquet lake: `<root>/<table>/record_id=<id>/part-0.parquet`, replaced atomically.

A table that only grows (balance snapshots) is appended to instead: each write adds its own
file beside the others (`part-<time>-<random>.parquet`), so two runs writing the same record
at once both land; nothing is read and rewritten.

The root is a local path or an `s3://bucket/prefix` URI (pyarrow's options may follow as a
query, e.g. `?endpoint_override=...&region=...`; credentials come from the AWS environment
variables, never from the URI, so they stay out of logs and metadata). Locally a partition is written to a
temporary file in its folder, synced, then renamed over the old one; on S3 a single PUT of
the object is already all-or-nothing. Either way a reader sees the old file or the new one.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from dagster import ConfigurableResource
from pydantic import PrivateAttr

RECORD_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TABLE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
PART = "part-0.parquet"


def check_record_id(record_id: str) -> str:
    """Record ids become folder names: refuse anything but ^[A-Za-z0-9_-]{1,64}$."""
    if not isinstance(record_id, str) or not RECORD_ID.fullmatch(record_id):
        raise ValueError(f"record id {record_id!r} is not of the form ^[A-Za-z0-9_-]{{1,64}}$")
    return record_id


def _check_table(table: str) -> str:
    if not TABLE.fullmatch(table):
        raise ValueError(f"table name {table!r} is not of the form ^[a-z][a-z0-9_]*$")
    return table


class Lake(ConfigurableResource):
    """Where the Parquet tables live: a local folder or `s3://bucket/prefix`."""

    root: str

    _fs: pafs.FileSystem | None = PrivateAttr(default=None)
    _base: str = PrivateAttr(default="")

    def _resolve(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            if "://" in self.root:
                self._fs, self._base = pafs.FileSystem.from_uri(self.root)
                self._base = self._base.rstrip("/")
            else:
                self._fs, self._base = pafs.LocalFileSystem(), str(Path(self.root).resolve())
        return self._fs, self._base

    @property
    def is_local(self) -> bool:
        return "://" not in self.root

    def _key(self, table: str, record_id: str | None) -> str:
        _, base = self._resolve()
        folder = [base, _check_table(table)]
        if record_id is not None:
            folder.append(f"record_id={check_record_id(record_id)}")
        return "/".join([*folder, PART])

    def partition_path(self, table: str, record_id: str | None) -> str:
        """Where the record's partition of `table` lives (None: an unpartitioned table)."""
        return self._key(table, record_id)

    def read(self, table: str, record_id: str | None = None,
             schema: pa.Schema | None = None) -> pa.Table | None:
        """The partition as written (all its files), or None if it does not exist yet."""
        fs, _ = self._resolve()
        parts = self._parts(self._key(table, record_id).rsplit("/", 1)[0])
        if not parts:
            return None
        return pa.concat_tables([pq.read_table(p, filesystem=fs, schema=schema,
                                               partitioning=None) for p in parts])

    def _parts(self, folder: str) -> list[str]:
        """The data files of a partition folder, oldest name first (temporary files start
        with a dot and are never read)."""
        fs, _ = self._resolve()
        if fs.get_file_info(folder).type != pafs.FileType.Directory:
            return []
        return sorted(i.path for i in fs.get_file_info(pafs.FileSelector(folder))
                      if i.type == pafs.FileType.File and i.base_name.startswith("part-")
                      and i.base_name.endswith(".parquet"))

    def append(self, table: str, record_id: str | None, data: pa.Table,
               schema: pa.Schema | None = None) -> str:
        """Add `data` to the partition as a file of its own: concurrent appends all land, a
        reader sees each file whole or not at all. Returns its path."""
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
        return self._put(self._key(table, record_id).rsplit("/", 1)[0] + "/" + name, data,
                         schema)

    def write(self, table: str, record_id: str | None, data: pa.Table,
              schema: pa.Schema | None = None) -> str:
        """Replace the partition whole: a reader sees old or new, never half. Returns its path."""
        return self._put(self._key(table, record_id), data, schema)

    def _put(self, key: str, data: pa.Table, schema: pa.Schema | None) -> str:
        """Write one file atomically: aside, synced, then renamed into place (one PUT on S3)."""
        if schema is not None:
            data = data.select(schema.names).cast(schema)
        fs, _ = self._resolve()
        parent = key.rsplit("/", 1)[0]
        fs.create_dir(parent, recursive=True)
        if not self.is_local:
            pq.write_table(data, key, filesystem=fs, compression="zstd")
            return f"{self.root.split('://', 1)[0]}://{key}"
        tmp = f"{parent}/.{key.rsplit('/', 1)[1]}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as fh:
                pq.write_table(data, fh, compression="zstd")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, key)
            fsync(parent)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return key

    def partitions(self, table: str) -> list[str]:
        """Record ids that have a partition of `table`."""
        fs, base = self._resolve()
        folder = f"{base}/{_check_table(table)}"
        if fs.get_file_info(folder).type == pafs.FileType.NotFound:
            return []
        out = []
        for info in fs.get_file_info(pafs.FileSelector(folder)):
            name = info.base_name
            if info.type == pafs.FileType.Directory and name.startswith("record_id="):
                out.append(name.split("=", 1)[1])
        return sorted(out)


def fsync(path: str | os.PathLike) -> None:
    """Flush a file, or a folder (so that a rename in it is durable), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
