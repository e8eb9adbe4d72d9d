"""The lake: one Delta table per product at `<root>/<table>`, each record's rows in it.

A run replaces exactly its records' rows of a table in one commit (`resources/delta.py`).
Tables that only grow (balance snapshots) are appended to; tables not kept by record
(`records`) are replaced whole. `record_id` is a column of every table but `records`' own,
after the product's columns. The root is a local path or an `s3://bucket/prefix` URI
(resources/object_store.py; docs/lake.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from dagster import ConfigurableResource

from . import delta
from .privacy import stats_columns

TABLE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
check_record_id = delta.check_record_id


class Lake(ConfigurableResource):
    """Where the Delta tables live: a local folder or `s3://bucket/prefix`."""

    root: str

    @property
    def is_local(self) -> bool:
        return "://" not in self.root

    def table_uri(self, table: str) -> str:
        """Where `table` lives (an s3 root's query kept, for resources.delta)."""
        if not isinstance(table, str) or not TABLE.fullmatch(table):
            raise ValueError(f"table name {table!r} is not of the form ^[a-z][a-z0-9_]*$")
        if self.is_local:
            return str(Path(self.root).resolve() / table)
        base, _, query = self.root.partition("?")
        return f"{base.rstrip('/')}/{table}" + (f"?{query}" if query else "")

    def shown(self, table: str) -> str:
        """The table's location as metadata and messages show it (no query)."""
        return self.table_uri(table).split("?", 1)[0]

    def replace(self, table: str, parts: Mapping[str, pa.Table], schema: pa.Schema | None = None,
                window: Mapping[str, date | datetime] | None = None) -> int:
        """Replace each record's rows with its table in one commit; the version."""
        if schema is None and parts:
            schema = next(iter(parts.values())).schema
        return delta.replace(self.table_uri(table), schema, parts, window=window,
                             stats=stats_columns(table))

    def replace_batches(self, table: str,
                        parts: Mapping[str, Callable[[], Iterable[pa.RecordBatch]]],
                        schema: pa.Schema, window: Mapping[str, date | datetime] | None = None
                        ) -> int:
        """`replace`, each record's rows read batch by batch from `parts[record]()`."""
        return delta.replace_batches(self.table_uri(table), schema, parts, window=window,
                                     stats=stats_columns(table))

    def replace_stream(self, table: str, record_ids: Sequence[str],
                       rows: Callable[[], Iterable[pa.RecordBatch]], schema: pa.Schema) -> int:
        """Replace every row of `record_ids` with `rows()` in one commit; the version."""
        return delta.replace_stream(self.table_uri(table), schema, record_ids, rows,
                                    stats=stats_columns(table))

    def overwrite_stream(self, table: str, rows: Callable[[], Iterable[pa.RecordBatch]],
                         schema: pa.Schema) -> int:
        """Replace the whole table with `rows()` (as `replace_stream`'s); the version."""
        return delta.overwrite_stream(self.table_uri(table), schema, rows,
                                      stats=stats_columns(table))

    def scan(self, table: str, record_ids: str | Sequence[str], schema: pa.Schema,
             where: pc.Expression | None = None, version: int | None = None
             ) -> Iterator[pa.RecordBatch]:
        """A record's rows (or several records') that `where` keeps, batch by batch, in
        `schema`'s columns and types, at the latest version or `version` (nothing if the
        table does not exist yet)."""
        for batch in delta.scan(self.table_uri(table), record_ids, schema.names, where,
                                version):
            yield batch.cast(schema)

    def row_counts(self, table: str, record_ids: Sequence[str]) -> dict[str, int]:
        """How many rows each of `record_ids` has in `table` (none: left out)."""
        return delta.count_rows(self.table_uri(table), record_ids)

    def write(self, table: str, record_id: str | None, data: pa.Table,
              schema: pa.Schema | None = None) -> int:
        """Replace one record's rows (None: the whole table, one not kept by record) in one
        commit: a reader sees old or new, never half. Returns the committed version."""
        if record_id is None:
            return delta.overwrite(self.table_uri(table), schema or data.schema, data,
                                   stats=stats_columns(table))
        return self.replace(table, {record_id: data}, schema)

    def append(self, table: str, parts: Mapping[str, pa.Table],
               schema: pa.Schema | None = None) -> int:
        """Add each record's rows, in one commit: concurrent appends all land."""
        if not parts:
            raise ValueError("append needs at least one record")
        schema = schema or next(iter(parts.values())).schema
        full = delta.with_record_id(schema)
        rows = pa.concat_tables([
            data.select(schema.names).append_column(
                "record_id", pa.array([check_record_id(rid)] * data.num_rows, pa.string()))
            for rid, data in parts.items()])
        return delta.append(self.table_uri(table), full, rows, stats=stats_columns(table))

    def append_rows(self, table: str, rows: pa.Table, schema: pa.Schema) -> int:
        """Add rows that carry their `record_id` already, in one commit."""
        for rid in pc.unique(rows["record_id"]).to_pylist():
            check_record_id(rid)
        return delta.append(self.table_uri(table), delta.with_record_id(schema), rows,
                            stats=stats_columns(table))

    def erase(self, table: str, record_ids: Sequence[str],
              before_cut: Callable[[int], None] | None = None) -> dict:
        """Delete the records' rows and purge every file that held them (`delta.erase`)."""
        return delta.erase(self.table_uri(table), record_ids, before_cut)

    def changed_records(self, table: str, since: int) -> tuple[int, set[str]] | None:
        """(latest version, records changed after `since`); None if the log cannot say."""
        return delta.changed_records(self.table_uri(table), since)

    def cut_after(self, table: str, version: int) -> bool:
        """Whether an erasure cut the table's history after `version` (`delta.cut_after`)."""
        return delta.cut_after(self.table_uri(table), version)

    def read(self, table: str, record_id: str | None = None, schema: pa.Schema | None = None,
             version: int | datetime | None = None) -> pa.Table | None:
        """One record's rows (None: the whole table) in `schema`'s columns and types, at
        `version` (default: the latest); None if the table does not exist yet."""
        columns = None if schema is None else schema.names
        out = delta.read(self.table_uri(table), record_id, columns, version)
        return out if out is None or schema is None else out.cast(schema)

    def read_many(self, table: str, record_ids: Sequence[str],
                  schema: pa.Schema) -> dict[str, pa.Table]:
        """The rows of each of `record_ids` that has some, in one pass over the table."""
        ids = [check_record_id(r) for r in record_ids]
        if not ids:
            return {}
        rows = delta.read(self.table_uri(table), ids, [*schema.names, "record_id"])
        if rows is None or rows.num_rows == 0:
            return {}
        rows = rows.sort_by("record_id")  # each record's rows one slice; order kept within
        out, at = {}, 0
        for item in pc.value_counts(rows["record_id"]).to_pylist():  # in order of appearance
            out[item["values"]] = rows.slice(at, item["counts"]).select(schema.names).cast(schema)
            at += item["counts"]
        return out

    def version(self, table: str) -> int | None:
        """The table's latest version, None if it does not exist yet."""
        return delta.version(self.table_uri(table))

    def row_count(self, table: str, version: int | None = None) -> int | None:
        """The table's rows at `version` from its log's statistics (`delta.row_count`)."""
        return delta.row_count(self.table_uri(table), version)

    def files(self, table: str, version: int | datetime | None = None) -> list[str]:
        """The data files of the table's snapshot (latest or `version`)."""
        return delta.files(self.table_uri(table), version)


def fsync(path: str | os.PathLike) -> None:
    """Flush a file, or a folder (so that a rename in it is durable), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
