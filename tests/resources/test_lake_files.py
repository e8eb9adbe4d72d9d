"""Every data file of every lake table keeps the table's declared Arrow schema
(`resources.tables.lake_schema`), and a bloom filter of `record_id` and of `customer_id`
where it has them, after every kind of write: append, replace (whole, windowed and
streamed), overwrite, erase, compaction (bin-packing and Z-order) and vacuum. And a file
another Delta writer made in other Arrow types (delta-rs's own DELETE writes `string_view`)
still reads, by record, whole, and as of a version, until a write of ours rewrites it. Real
Delta tables on disk; nothing mocked."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from resources import delta
from resources.lake import Lake
from resources.privacy import stats_columns
from resources.tables import TABLES, lake_schema, schema
from tests.ground_truth import holding, partitions

DAY0 = datetime(2025, 3, 1, 8, 15, 30, 123000, tzinfo=UTC)


def value(t: pa.DataType, name: str, i: int):
    """A value of type `t` for row `i` of column `name`."""
    if pa.types.is_string(t):
        return f"{name}-{i}"
    if pa.types.is_integer(t):
        return i
    if pa.types.is_floating(t):
        return i + 0.5
    if pa.types.is_decimal(t):
        return Decimal(f"{i}.25")
    if pa.types.is_timestamp(t):
        return DAY0 + timedelta(days=i)
    if pa.types.is_date(t):
        return date(2025, 3, 1) + timedelta(days=i)
    if pa.types.is_boolean(t):
        return i % 2 == 0
    if pa.types.is_binary(t):
        return f"sealed-{i}".encode()
    if pa.types.is_list(t):
        return [value(t.value_type, name, i), value(t.value_type, name, i + 1)]
    raise AssertionError(f"no value for {t}")


def rows(declared: pa.Schema, n: int, start: int = 0, record: str | None = None) -> pa.Table:
    """`n` rows of every column of `declared` (the record's id, where it has the column)."""
    return pa.table({f.name: pa.array([record if f.name == "record_id" and record else
                                       value(f.type, f.name, start + i) for i in range(n)],
                                      f.type) for f in declared}, schema=declared)


def footers(lake: Lake, table: str) -> dict[str, pq.FileMetaData]:
    """Each live data file's Parquet footer."""
    out = {}
    for uri in lake.files(table):
        fs, path = pafs.FileSystem.from_uri(uri)
        with fs.open_input_file(path) as f:
            out[Path(path).name] = pq.ParquetFile(f).metadata
    return out


def file_schemas(lake: Lake, table: str) -> dict[str, pa.Schema]:
    """Each live data file's schema, as its Parquet footer holds it."""
    return {name: meta.schema.to_arrow_schema() for name, meta in footers(lake, table).items()}


BLOOM_FILTERED = ("record_id", "customer_id")  # where a table has them


def assert_declared(lake: Lake, table: str, after: str) -> None:
    declared = lake_schema(table)
    got = file_schemas(lake, table)
    assert got, f"{table} after {after}: no data file"
    wrong = {name: str(s) for name, s in got.items() if not s.equals(declared)}
    assert not wrong, f"{table} after {after}: files not in\n{declared}\n{wrong}"
    assert delta.stored(DeltaTable(lake.table_uri(table))).equals(declared)
    for column in BLOOM_FILTERED:  # a record's or a customer's rows are found by one
        if column not in declared.names:
            continue
        unfiltered = [name for name, chunks in column_chunks(lake, table, column).items()
                      if not chunks or any(c.bloom_filter_length in (None, 0) for c in chunks)]
        assert not unfiltered, f"{table} after {after}: no {column} bloom filter in " \
                               f"{unfiltered}"


def column_chunks(lake: Lake, table: str, column: str) -> dict[str, list]:
    """Each live data file's chunks of `column`, one a row group."""
    out = {}
    for name, meta in footers(lake, table).items():
        at = meta.schema.names.index(column)
        out[name] = [meta.row_group(g).column(at) for g in range(meta.num_row_groups)]
    return out


class Writer:
    """The lake's writes of one table, as the pipeline makes them: by record (the product
    tables, `landings`, `checks`) or whole (`records`, the audits)."""

    def __init__(self, lake: Lake, table: str) -> None:
        self.lake, self.table = lake, table
        self.by_record = TABLES[table].by_record
        self.declared = schema(table)  # what an asset passes; the lake adds record_id

    def replace(self, records: dict[str, int], window: dict[str, datetime] | None = None):
        if self.by_record:
            parts = {r: rows(self.declared, n, start=3 if window else 0)
                     for r, n in records.items()}
            return self.lake.replace(self.table, parts, self.declared, window=window)
        assert window is None
        whole = pa.concat_tables([rows(self.declared, n, record=r) for r, n in records.items()])
        return self.lake.write(self.table, None, whole, self.declared)

    def append(self, record: str, n: int):
        if self.by_record:
            return self.lake.append(self.table, {record: rows(self.declared, n)}, self.declared)
        return delta.append(self.lake.table_uri(self.table), self.declared,
                            rows(self.declared, n, record=record),
                            stats=stats_columns(self.table))


@pytest.mark.parametrize("table", list(TABLES))
def test_every_kind_of_write_keeps_every_file_in_the_declared_schema(tmp_path, table):
    lake, uri = Lake(root=str(tmp_path / "lake")), None
    write = Writer(lake, table)
    uri = lake.table_uri(table)
    write.replace({"r0": 3, "r1": 2, "r2": 2, "r3": 1})  # made by it
    assert_declared(lake, table, "the first write")
    write.append("r4", 2)
    write.append("r2", 1)
    assert_declared(lake, table, "appends")
    if write.by_record:  # r1's file rewritten without its rows, the others' kept
        write.replace({"r1": 4})
        assert_declared(lake, table, "a record's replace")
        lake.replace_batches(table, {"r3": lambda: rows(write.declared, 3).to_batches(2)},
                             write.declared)
        assert_declared(lake, table, "a streamed replace")
        if "trans_date" in write.declared.names:
            write.replace({"r0": 2}, window={"r0": DAY0 + timedelta(days=3)})
            assert_declared(lake, table, "a windowed replace")
    else:
        write.replace({"r0": 3, "r1": 4, "r2": 2, "r3": 1, "r4": 2})
        assert_declared(lake, table, "an overwrite of the whole table")
    before = lake.read(table)
    # r2's rows are in two files, each holding other records' too: both are rewritten
    erased = lake.erase(table, ["r2"])
    assert erased["rows_deleted"] == before.filter(pc.field("record_id") == "r2").num_rows
    assert erased["files_purged"] >= 2
    assert_declared(lake, table, "an erasure")
    left = lake.read(table)
    assert left.num_rows == before.num_rows - erased["rows_deleted"]
    assert sorted(pc.unique(left["record_id"]).to_pylist()) == ["r0", "r1", "r3", "r4"]
    for record in ("r0", "r1", "r3", "r4"):  # every other record reads, by itself too
        assert lake.read(table, record).num_rows == left.filter(
            pc.field("record_id") == record).num_rows
    assert lake.erase(table, ["r2"])["rows_deleted"] == 0  # again: nothing more
    write.append("r5", 1)
    compacted = delta.compact(uri, order_by="record_id")  # small files: Z-ordered whole
    assert compacted["files_removed"] >= 2
    assert_declared(lake, table, "a Z-order compaction")
    write.append("r6", 1)
    write.append("r7", 1)
    assert delta.compact(uri)["files_removed"] >= 2
    assert_declared(lake, table, "a compaction")
    assert delta.vacuum(uri, retention_hours=0)["files_removed"] >= 1
    assert_declared(lake, table, "a vacuum")
    on_disk = {p.name for p in Path(uri).glob("*.parquet")}
    assert on_disk == set(file_schemas(lake, table))
    final = lake.read(table)
    assert final.schema.equals(lake_schema(table))
    assert sorted(pc.unique(final["record_id"]).to_pylist()) == [
        "r0", "r1", "r3", "r4", "r5", "r6", "r7"]


def test_rows_given_in_other_arrow_types_are_written_in_the_declared_ones(tmp_path):
    """delta-rs writes the Arrow types it is given: rows in `large_string`, `string_view`,
    dictionaries or nanoseconds land in the table's own types."""
    lake = Lake(root=str(tmp_path / "lake"))
    declared = schema("transactions")
    lake.replace("transactions", {"a": rows(declared, 2)}, declared)
    other = {pa.string(): pa.large_string(), pa.binary(): pa.binary_view(),
             pa.timestamp("ms", tz="UTC"): pa.timestamp("ns", tz="UTC")}
    odd = pa.schema([pa.field(f.name, other.get(f.type, f.type)) for f in declared])
    plain = rows(declared, 3)
    given = plain.cast(odd).set_column(
        declared.get_field_index("currency"), pa.field("currency", pa.string_view()),
        plain["currency"].cast(pa.string_view()))
    lake.replace("transactions", {"b": given}, given.schema)
    lake.append("transactions", {"c": plain.set_column(
        declared.get_field_index("env"), "env",
        pc.dictionary_encode(plain["env"]))}, declared)
    lake.replace_batches("transactions", {"d": lambda: given.to_batches(2)}, given.schema)
    assert_declared(lake, "transactions", "writes of rows in other types")
    assert lake.read("transactions", "b", declared) == plain
    # a streamed replace keeps the rows, not their order (delta-rs writes a stream's batches
    # as they come)
    assert lake.read("transactions", "d", declared).sort_by("transaction_id") == plain


def test_files_another_writer_made_in_other_arrow_types_still_read(tmp_path):
    """delta-rs's DELETE (DataFusion's writer) rewrites the files it touches in
    `string_view`, `binary_view` and lists of them, as another Delta writer may: a read by
    record (pyarrow compares its filter with each row group's statistics), of many records,
    of the whole table and as of a version all still answer, in the table's types; the next
    write of ours that rewrites the file brings it back to the declared schema."""
    lake = Lake(root=str(tmp_path / "lake"))
    declared = schema("identity")
    uri = lake.table_uri("identity")
    lake.replace("identity", {r: rows(declared, 2) for r in ("a", "b", "c", "d")}, declared)
    DeltaTable(uri).delete("record_id = 'a'")  # not ours: files in view types
    kinds = {str(t) for s in file_schemas(lake, "identity").values() for t in s.types}
    assert {"string_view", "binary_view"} <= kinds
    version = lake.version("identity")
    for record in ("b", "c", "d"):
        assert lake.read("identity", record, declared) == rows(declared, 2)
        assert lake.read("identity", record, declared, version=version) == rows(declared, 2)
    many = lake.read_many("identity", ["a", "b", "d"], declared)
    assert sorted(many) == ["b", "d"] and many["d"] == rows(declared, 2)
    assert holding(lake, "identity", ["a", "b", "c"]) == {"b", "c"}
    assert lake.row_counts("identity", ["a", "b", "c"]) == {"b": 2, "c": 2}
    assert pa.Table.from_batches(list(lake.scan("identity", "c", declared))) == rows(declared, 2)
    whole = lake.read("identity")
    assert whole.schema.equals(lake_schema("identity")) and whole.num_rows == 6
    assert partitions(lake, "identity") == ["b", "c", "d"]
    lake.replace("identity", {"b": rows(declared, 1)}, declared)  # rewrites c's and d's file
    assert_declared(lake, "identity", "a replace of a file in view types")
    DeltaTable(uri).delete("record_id = 'c'")  # b's and d's file in view types again
    lake.append("identity", {"e": rows(declared, 1)}, declared)
    assert delta.compact(uri, order_by="record_id")["files_removed"] == 2
    assert_declared(lake, "identity", "a compaction of a file in view types")
    assert lake.read("identity", "d", declared) == rows(declared, 2)
