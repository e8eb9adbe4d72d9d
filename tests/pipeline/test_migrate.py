"""`ledgerlake lake migrate`: a lake in the folder layout, written here with pyarrow as the
previous code wrote it, becomes Delta tables with every record's rows, exactly; a second run
does nothing; every state an interrupted run leaves is refused, then finished by resume."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from assets.warehouse import UNPARTITIONED
from pipeline import migrate as migration
from pipeline.migrate import OLD_TABLES, MigrationError, main, migrate
from resources import delta
from resources.lake import Lake

RECORDS = ["rec-a", "rec_B2", "1234567890", "007"]  # all digits, and a leading zero, stay text
PARTITIONED = [t for t in OLD_TABLES if t not in UNPARTITIONED]


def _column(field: pa.Field, n: int, seed: int) -> pa.Array:
    t, out = field.type, []
    for i in range(n):
        if field.nullable and i % 4 == 3:
            out.append(None)
        elif pa.types.is_decimal(t):
            out.append(Decimal((seed * 7919 + i * 1013) % 200_000 - 50_000) / 100)  # cents
        elif pa.types.is_timestamp(t):
            out.append(datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=seed * 97 + i))
        elif pa.types.is_date(t):
            out.append(date(2024, 1, 1) + timedelta(days=seed + i))
        elif pa.types.is_list(t):
            out.append([f"{field.name}-{i}", "x"])
        elif pa.types.is_boolean(t):
            out.append(i % 2 == 0)
        elif pa.types.is_integer(t):
            out.append(seed * 10 + i)
        elif pa.types.is_floating(t):
            out.append(seed + i / 8)
        else:
            out.append(f"{field.name}-{seed}-{i}")
    return pa.array(out, t)


def _rows(table: str, n: int, seed: int) -> pa.Table:
    schema = OLD_TABLES[table]
    return pa.Table.from_arrays([_column(f, n, seed) for f in schema], schema=schema)


def _put(path: Path, rows: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path, compression="zstd")


def old_lake(root: Path) -> dict[str, dict[str, pa.Table]]:
    """A lake as the folder layout wrote it; per table, each record's rows (no record_id)."""
    lake: dict[str, dict[str, pa.Table]] = {}
    for t, table in enumerate(PARTITIONED):
        lake[table] = {}
        for r, rid in enumerate(RECORDS):
            folder = root / table / f"record_id={rid}"
            if table == "balance_history":  # appended: a file per snapshot, all of them its rows
                files = [_rows(table, 2 + k, seed=t * 31 + r * 5 + k) for k in range(3)]
                for k, rows in enumerate(files):
                    _put(folder / f"part-{1_700_000_000_000_000_000 + k:020d}-{k:012x}.parquet",
                         rows)
                lake[table][rid] = pa.concat_tables(files)
            else:
                lake[table][rid] = rows = _rows(table, 1 + (t + r) % 4, seed=t * 31 + r)
                _put(folder / "part-0.parquet", rows)
            # a write interrupted long ago: temporary files are no one's rows
            (folder / ".part-0.parquet.0123abcd.tmp").write_bytes(b"not parquet")
    records = _rows("records", len(RECORDS), seed=99).set_column(
        0, "record_id", pa.array(RECORDS, pa.string()))
    _put(root / "records" / "part-0.parquet", records)
    lake["records"] = {rid: records.filter(pc.equal(records["record_id"], rid))
                       for rid in RECORDS}
    return lake


def _by_record(rows: pa.Table) -> dict[str, list]:
    out: dict[str, list] = {}
    for row in rows.to_pylist():
        out.setdefault(row["record_id"], []).append(row)
    return {rid: sorted(rs, key=repr) for rid, rs in out.items()}


def assert_converted(root: Path, want: dict[str, dict[str, pa.Table]]) -> None:
    """Every table is a Delta table holding each record's rows as the folder layout did, read
    by deltalake itself: same ids, counts, exact money sums and rows."""
    for table, records in want.items():
        schema = OLD_TABLES[table]
        full = schema if "record_id" in schema.names else schema.append(
            pa.field("record_id", pa.string()))
        got = DeltaTable(str(root / table)).to_pyarrow_table()
        assert got.column_names == full.names, table
        got = got.cast(full)  # Delta keeps timestamps in microseconds
        assert sorted(set(got["record_id"].to_pylist())) == sorted(
            r for r, rows in records.items() if rows.num_rows), table
        old = pa.concat_tables([
            rows if "record_id" in rows.column_names
            else rows.append_column("record_id", pa.array([rid] * rows.num_rows, pa.string()))
            for rid, rows in records.items()])
        assert got.num_rows == old.num_rows, table
        for rid, rows in records.items():
            mine = got.filter(pc.equal(got["record_id"], rid))
            assert mine.num_rows == rows.num_rows, (table, rid)
            for f in schema:
                if pa.types.is_decimal(f.type):
                    assert pc.sum(mine[f.name]).as_py() == pc.sum(rows[f.name]).as_py(), (
                        table, rid, f.name)
        assert _by_record(got) == _by_record(old), table
    leftovers = sorted(p.name for p in root.iterdir() if p.name.startswith("."))
    assert leftovers == [".migrate.lock"]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root with a digest of its bytes (the lock file aside)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".migrate.lock"}


@pytest.fixture
def lake(tmp_path) -> tuple[Path, dict]:
    root = tmp_path / "lake"
    return root, old_lake(root)


@pytest.fixture
def converted(tmp_path, lake) -> Path:
    """The same lake converted elsewhere: the Delta tables an interrupted run had built."""
    root, _ = lake
    done = tmp_path / "converted"
    shutil.copytree(root, done)
    migrate(done, say=lambda _: None)
    return done


def test_every_table_converted_in_batches_then_a_second_run_does_nothing(lake, monkeypatch):
    root, want = lake
    monkeypatch.setattr(migration, "BATCH", 3)  # 4 records: two commits a table
    monkeypatch.setattr(migration, "PROGRESS", 3)
    said: list[str] = []
    report = migrate(root, say=said.append)
    assert_converted(root, want)
    for table in PARTITIONED:
        assert report[table] == {"action": "converted", "records": 4, "check": "passed",
                                 "rows": sum(r.num_rows for r in want[table].values())}
        assert DeltaTable(str(root / table)).version() == 2  # created, then a commit a batch
    assert report["records"] == {"action": "converted", "records": 4, "rows": 4,
                                 "check": "passed"}
    assert "transactions: converting 4 records" in said
    assert "transactions: 3 records written" in said
    assert any(s.startswith("balance_history: 4 records, 36 rows checked") for s in said)
    # the pipeline's own reader sees the rows too
    rows = Lake(root=str(root)).read("transactions", "007", OLD_TABLES["transactions"])
    assert rows.num_rows == want["transactions"]["007"].num_rows

    before = snapshot(root)
    said.clear()
    again = migrate(root, say=said.append)
    assert snapshot(root) == before
    assert {line["action"] for line in again.values()} == {"already converted"}
    assert said == [f"{t}: already converted" for t in OLD_TABLES]


def test_large_records_make_smaller_batches(lake, monkeypatch):
    root, want = lake
    monkeypatch.setattr(migration, "BATCH_ROWS", 1)  # every record is large: one a commit
    migrate(root, say=lambda _: None)
    assert_converted(root, want)
    assert DeltaTable(str(root / "transactions")).version() == 4


def test_absent_and_empty_tables_are_skipped(tmp_path):
    root = tmp_path / "lake"
    rows = _rows("accounts", 3, seed=1)
    _put(root / "accounts" / "record_id=r1" / "part-0.parquet", rows)
    (root / "income").mkdir()
    (root / "payments" / "record_id=r1").mkdir(parents=True)  # a write that never finished
    (root / "payments" / "record_id=r1" / ".part-0.parquet.ab.tmp").write_bytes(b"x")
    report = migrate(root, say=lambda _: None)
    assert report["accounts"]["action"] == "converted"
    assert report["income"]["action"] == "empty"
    assert report["payments"]["action"] == "empty"
    assert report["transactions"] == {"action": "absent", "records": None, "rows": None,
                                      "check": None}
    assert DeltaTable(str(root / "accounts")).to_pyarrow_table().num_rows == 3
    assert not (root / "transactions").exists()


def test_a_record_with_no_rows_converts_to_none(tmp_path):
    root = tmp_path / "lake"
    _put(root / "payments" / "record_id=r1" / "part-0.parquet", _rows("payments", 2, seed=3))
    _put(root / "payments" / "record_id=r2" / "part-0.parquet", _rows("payments", 0, seed=3))
    report = migrate(root, say=lambda _: None)
    assert report["payments"] == {"action": "converted", "records": 2, "rows": 2,
                                  "check": "passed"}
    got = DeltaTable(str(root / "payments")).to_pyarrow_table()
    assert got["record_id"].to_pylist() == ["r1", "r1"]


@pytest.mark.parametrize("table", ["transactions", "records"])
def test_a_table_the_new_pipeline_wrote_into_unmigrated_is_refused(lake, table):
    root, want = lake
    schema = OLD_TABLES[table]
    newer = _rows(table, 2, seed=7)
    writes = (lambda: Lake(root=str(root)).write(table, None, newer, schema)) \
        if table in UNPARTITIONED else \
        (lambda: Lake(root=str(root)).replace(table, {"rec-new": newer}, schema))
    with pytest.raises(ValueError, match="run `ledgerlake lake migrate` before writing"):
        writes()  # today's lake refuses to; a ledgerlake from before that refusal did not:
    uri = Lake(root=str(root)).table_uri(table)
    if table in UNPARTITIONED:
        delta.overwrite(uri, schema, newer)
    else:
        delta.replace(uri, schema, {"rec-new": newer})
    before = snapshot(root)
    for resume in (False, True):
        with pytest.raises(MigrationError, match=rf"^{table}: .*holds a Delta table and the "
                                                 r"folder layout both") as err:
            migrate(root, resume=resume, say=lambda _: None)
        assert snapshot(root) == before
    assert ("delete part-0.parquet" if table in UNPARTITIONED
            else "ledgerlake rerun RECORD") in str(err.value)


def _interrupted_in_build(root: Path, done: Path) -> None:
    # a batch or two landed in the staging table, with rows the old layout never had
    Lake(root=str(root / ".transactions.migrating")).replace(
        "transactions", {"rec-a": _rows("transactions", 9, seed=5)},
        OLD_TABLES["transactions"])


def _interrupted_before_first_commit(root: Path, done: Path) -> None:
    (root / ".transactions.migrating").mkdir()


def _interrupted_between_renames(root: Path, done: Path) -> None:
    os.rename(root / "transactions", root / ".transactions.old-layout")
    shutil.copytree(done / "transactions", root / ".transactions.migrating" / "transactions")


def _interrupted_after_swap(root: Path, done: Path) -> None:
    os.rename(root / "transactions", root / ".transactions.old-layout")
    shutil.copytree(done / "transactions", root / "transactions")


def _interrupted_before_staging_removed(root: Path, done: Path) -> None:
    _interrupted_after_swap(root, done)
    (root / ".transactions.migrating").mkdir()


def _interrupted_while_deleting(root: Path, done: Path) -> None:
    trash = root / ".transactions.old-layout.deleting"
    os.rename(root / "transactions", trash)
    shutil.rmtree(trash / "record_id=007")
    (trash / "record_id=rec-a" / "part-0.parquet").unlink()
    shutil.copytree(done / "transactions", root / "transactions")


def _swapped_but_not_deleted_two_tables(root: Path, done: Path) -> None:
    # a crash between the tables of phase 2: one swapped, one built but not swapped
    _interrupted_after_swap(root, done)
    shutil.copytree(done / "accounts", root / ".accounts.migrating" / "accounts")


@pytest.mark.parametrize("crash", [
    _interrupted_in_build, _interrupted_before_first_commit, _interrupted_between_renames,
    _interrupted_after_swap, _interrupted_before_staging_removed, _interrupted_while_deleting,
    _swapped_but_not_deleted_two_tables], ids=lambda f: f.__name__.lstrip("_"))
def test_an_interrupted_run_is_refused_then_finished_by_resume(lake, converted, crash):
    root, want = lake
    crash(root, converted)
    before = snapshot(root)
    with pytest.raises(MigrationError, match=r"transactions: a migration was interrupted "
                                             r"\(found \.transactions\..*--resume"):
        migrate(root, say=lambda _: None)
    assert snapshot(root) == before

    report = migrate(root, resume=True, say=lambda _: None)
    assert_converted(root, want)
    assert report["transactions"]["check"] == "passed"
    assert {line["action"] for line in migrate(root, say=lambda _: None).values()} == {
        "already converted"}


def test_resume_keeps_the_old_layout_when_the_swapped_table_disagrees(lake, converted):
    root, _ = lake
    _interrupted_after_swap(root, converted)
    # a run landed after the swap: the Delta table no longer holds what the old layout did
    Lake(root=str(root)).replace("transactions", {"rec-a": _rows("transactions", 1, seed=8)},
                                 OLD_TABLES["transactions"])
    before = snapshot(root)
    with pytest.raises(MigrationError, match=r"transactions: the Delta table at .* disagrees "
                                             r"with the folder layout for 1 records, e\.g\. "
                                             r"rec-a.*left in place"):
        migrate(root, resume=True, say=lambda _: None)
    assert snapshot(root) == before


def test_a_state_no_crash_leaves_is_refused_even_with_resume(lake, converted):
    root, _ = lake
    shutil.rmtree(root / "transactions")
    shutil.copytree(converted / "transactions", root / "transactions")
    shutil.copytree(converted / "transactions", root / ".transactions.migrating" / "transactions")
    before = snapshot(root)
    with pytest.raises(MigrationError, match=r"transactions: found \.transactions\.migrating "
                                             r"with transactions a Delta table: no interrupted"):
        migrate(root, resume=True, say=lambda _: None)
    assert snapshot(root) == before


def test_a_truncated_file_fails_the_migration_and_changes_nothing(lake):
    root, want = lake
    bad = root / "transactions" / "record_id=rec_B2" / "part-0.parquet"
    whole = bad.read_bytes()
    bad.write_bytes(whole[: len(whole) // 2])
    before = snapshot(root)
    with pytest.raises(MigrationError, match=rf"transactions: cannot read {bad}: .*Nothing was "
                                             r"converted"):
        migrate(root, say=lambda _: None)
    # not even the tables before it: nothing is swapped until every table checks out
    assert snapshot(root) == before
    assert sorted(p.name for p in root.iterdir()) == [".migrate.lock", *sorted(OLD_TABLES)]

    bad.write_bytes(whole)  # restored from a backup: a plain run converts it
    migrate(root, say=lambda _: None)
    assert_converted(root, want)


def test_money_that_is_not_decimal_is_refused_not_rounded(tmp_path):
    root = tmp_path / "lake"
    rows = _rows("payments", 2, seed=1)
    rows = rows.set_column(rows.schema.get_field_index("amount"), "amount",
                           pa.array([1.005, 2.5], pa.float64()))
    _put(root / "payments" / "record_id=r1" / "part-0.parquet", rows)
    with pytest.raises(MigrationError, match=r"money column amount is double, not decimal"):
        migrate(root, say=lambda _: None)
    assert sorted(p.name for p in root.iterdir()) == [".migrate.lock", "payments"]


def test_object_storage_is_refused():
    with pytest.raises(MigrationError, match=r"s3:// cannot be migrated in place: .*not be "
                                             r"atomic.*local folder"):
        migrate("s3://bucket/lake?endpoint_override=127.0.0.1:9000", say=lambda _: None)


def test_one_migration_at_a_time(lake):
    root, _ = lake
    with open(root / ".migrate.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(MigrationError, match="another migration of .* is running"):
            migrate(root, say=lambda _: None)


def test_command_line(lake, converted, monkeypatch, capsys):
    root, want = lake
    monkeypatch.setenv("LEDGERLAKE_LAKE", str(root))
    assert main(["--bogus"]) == 2
    assert main(["--lake", str(root / "nowhere")]) == 2
    assert "no lake at" in capsys.readouterr().err
    assert main(["--lake", "gs://bucket/lake"]) == 2
    assert main(["--lake", "s3://bucket/lake"]) == 1
    assert "cannot be migrated in place" in capsys.readouterr().err

    _interrupted_after_swap(root, converted)
    assert main([]) == 1  # the configured lake, refused: interrupted
    assert "--resume" in capsys.readouterr().err
    assert main(["--resume"]) == 0
    assert "transactions: 4 records" in capsys.readouterr().out
    assert_converted(root, want)
    assert main(["--lake", f"file://{root}"]) == 0
    assert "records: already converted" in capsys.readouterr().out


def test_a_file_written_before_a_column_was_added_reads_it_as_null(tmp_path):
    root = tmp_path / "lake"
    rows = _rows("payments", 3, seed=2)
    _put(root / "payments" / "record_id=r1" / "part-0.parquet",
         rows.drop_columns(["schedule_interval"]))
    _put(root / "payments" / "record_id=r2" / "part-0.parquet",
         rows.append_column("fee_kobo", pa.array([1, 2, 3])))
    with pytest.raises(MigrationError, match=r"record_id=r2/part-0\.parquet has columns the "
                                             r"table has not: \['fee_kobo'\]"):
        migrate(root, say=lambda _: None)
    (root / "payments" / "record_id=r2" / "part-0.parquet").unlink()
    migrate(root, say=lambda _: None)
    got = DeltaTable(str(root / "payments")).to_pyarrow_table()
    assert got["schedule_interval"].null_count == 3
    assert got.drop_columns(["schedule_interval", "record_id"]).cast(
        rows.drop_columns(["schedule_interval"]).schema) == rows.drop_columns(
        ["schedule_interval"])
