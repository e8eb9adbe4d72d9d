"""The Parquet lake: `<root>/<table>/record_id=<id>/part-0.parquet`, replaced atomically."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import ConfigurableResource

RECORD_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_record_id(record_id: str) -> str:
    if not isinstance(record_id, str) or not RECORD_ID.fullmatch(record_id):
        raise ValueError(f"record id {record_id!r} is not of the form ^[A-Za-z0-9_-]{{1,64}}$")
    return record_id


class Lake(ConfigurableResource):
    root: str

    def table_dir(self, table: str) -> Path:
        return Path(self.root) / table

    def partition_path(self, table: str, record_id: str) -> Path:
        check_record_id(record_id)
        return self.table_dir(table) / f"record_id={record_id}" / "part-0.parquet"

    def write_partition(self, table: str, record_id: str, data: pa.Table) -> Path:
        """Replace the record's partition of `table` whole: a reader sees old or new, never half."""
        path = self.partition_path(table, record_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-", suffix=".parquet.tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                pq.write_table(data, fh, compression="zstd")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path
