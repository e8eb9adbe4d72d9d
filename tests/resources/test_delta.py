"""The lake's Delta tables: per-record replace in one commit, concurrent writers, exact money,
time travel, compaction and vacuum, S3. Writers run in real processes; nothing is mocked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from resources import delta
from tests.resources.delta_writer import DAY0, MONEY, SCHEMA, rows
from tests.resources.test_lake import s3_endpoint  # noqa: F401  (a fixture: moto's S3)

ROOT = Path(__file__).resolve().parents[2]


def of(table: pa.Table, rid: str) -> list[dict]:
    return sorted(table.filter(pc.field("record_id") == rid).to_pylist(),
                  key=lambda r: r["trans_date"])


def test_replace_lands_rows_and_replaces_exactly_the_named_records(tmp_path):
    uri = str(tmp_path / "transactions")
    assert delta.read(uri) is None and delta.version(uri) is None
    v1 = delta.replace(uri, SCHEMA, {"a": rows(3), "b": rows(2), "c": rows(4)})
    v2 = delta.replace(uri, SCHEMA, {"b": rows(5, gen=1), "c": rows(0, gen=1)})
    assert v2 > v1 == delta.version(uri) - 1
    table = delta.read(uri)
    assert table.schema == SCHEMA
    assert [r["gen"] for r in of(table, "a")] == [0, 0, 0]
    assert [r["gen"] for r in of(table, "b")] == [1] * 5
    assert of(table, "c") == []  # an empty part empties its record
    one = delta.read(uri, record_id="b", columns=["id", "gen"])
    assert one.column_names == ["id", "gen"] and one.num_rows == 5


def test_a_window_replaces_only_its_rows_and_keeps_older_ones(tmp_path):
    uri = str(tmp_path / "transactions")
    delta.replace(uri, SCHEMA, {"a": rows(10), "b": rows(10)})
    since = DAY0 + timedelta(days=6)
    delta.replace(uri, SCHEMA, {"a": rows(2, gen=1, start=6), "b": rows(3, gen=1)},
                  window={"a": since})
    a = of(delta.read(uri), "a")
    assert [(r["id"], r["gen"]) for r in a] == [(f"t{i}", 0) for i in range(6)] + [
        ("t6", 1), ("t7", 1)]  # t8, t9 vanished at source, so they leave the lake
    assert [r["gen"] for r in of(delta.read(uri), "b")] == [1, 1, 1]
    before = delta.version(uri)
    with pytest.raises(ValueError, match="record a: rows dated before its window"):
        delta.replace(uri, SCHEMA, {"a": rows(3, gen=2, start=5)}, window={"a": since})
    with pytest.raises(ValueError, match="no time zone"):
        delta.replace(uri, SCHEMA, {"a": rows(1, start=8)}, window={"a": datetime(2025, 1, 7)})
    with pytest.raises(ValueError, match="window names records"):
        delta.replace(uri, SCHEMA, {"a": rows(1, start=8)}, window={"z": since})
    assert delta.version(uri) == before


@pytest.mark.parametrize("bad", ["a'b", "a' OR '1'='1", "../x", "", "x" * 65, "ré", "a b"])
def test_bad_record_ids_are_refused_with_nothing_written(tmp_path, bad):
    uri = str(tmp_path / "transactions")
    with pytest.raises(ValueError, match="record id"):
        delta.replace(uri, SCHEMA, {"good": rows(1), bad: rows(1)})
    assert not Path(uri).exists()
    delta.replace(uri, SCHEMA, {"good": rows(1)})
    with pytest.raises(ValueError, match="record id"):
        delta.read(uri, record_id=bad)
    assert delta.version(uri) == 1


def test_money_is_exact_through_the_table_and_duckdb(tmp_path):
    uri = str(tmp_path / "transactions")
    parts = {f"r{i}": rows(50, amount="0.10") for i in range(6)}
    parts["big"] = rows(2, amount="99999999999999.99")
    delta.replace(uri, SCHEMA, parts)
    expected = Decimal("0.10") * 300 + Decimal("99999999999999.99") * 2
    table = delta.read(uri)
    assert table.schema.field("amount").type == MONEY
    assert sum(table["amount"].to_pylist()) == expected
    con = duckdb.connect()
    total, kind = con.execute("SELECT sum(amount), typeof(any_value(amount)) "
                              "FROM read_parquet(?)", [delta.files(uri)]).fetchone()
    assert total == expected and kind == "DECIMAL(18,2)"
    floats = rows(1).set_column(2, "amount", pa.array([0.1], pa.float64()))
    with pytest.raises(TypeError, match="amount is money"):
        delta.replace(uri, SCHEMA, {"r0": floats})


def test_files_answer_an_earlier_snapshot(tmp_path):
    uri = str(tmp_path / "transactions")
    v1 = delta.replace(uri, SCHEMA, {"a": rows(2), "b": rows(3)})
    time.sleep(0.1)  # apart, so the moment between the commits is unambiguous
    when = datetime.now(UTC)
    time.sleep(0.1)
    delta.replace(uri, SCHEMA, {"a": rows(4, gen=1)})

    def answer(files: list[str]) -> list[tuple]:
        return duckdb.connect().execute(
            "SELECT record_id, count(*), max(gen) FROM read_parquet(?) GROUP BY 1 ORDER BY 1",
            [files]).fetchall()

    assert answer(delta.files(uri)) == [("a", 4, 1), ("b", 3, 0)]
    assert answer(delta.files(uri, version=v1)) == [("a", 2, 0), ("b", 3, 0)]
    assert answer(delta.files(uri, version=when)) == [("a", 2, 0), ("b", 3, 0)]
    assert delta.read(uri, record_id="a", version=v1).num_rows == 2
    assert all(f.startswith(str(tmp_path)) for f in delta.files(uri))


def test_a_snapshot_lists_its_largest_file_first_so_duckdb_does_not_underestimate_it(tmp_path):
    """DuckDB estimates a file list's rows as its first file's times the files. In the log's
    order a small file came first (a run's, since the last compaction), and a join with the
    table took it for its small side: a hash table of the whole table, to find a few rows."""
    uri = str(tmp_path / "landings")

    def landed(record: str, n: int) -> pa.Table:
        part = rows(n)
        return part.append_column("record_id", pa.array([record] * n))

    delta.append(uri, SCHEMA, landed("small", 1))
    delta.append(uri, SCHEMA, landed("large", 2000))
    delta.append(uri, SCHEMA, landed("small2", 2))
    listed = delta.files(uri)
    size = {Path(f).name: Path(f).stat().st_size for f in listed}
    assert len(size) == 3
    assert [size[Path(f).name] for f in listed] == sorted(size.values(), reverse=True)
    con = duckdb.connect()
    plan = con.execute("explain select * from read_parquet(?)", [listed]).fetchall()[0][1]
    estimate = int(re.search(r"~([\d,]+) rows", plan)[1].replace(",", ""))
    rows_held = con.execute("select count(*) from read_parquet(?)", [listed]).fetchone()[0]
    assert rows_held == 2003
    assert estimate >= rows_held


def test_a_table_that_may_hold_deletion_vectors_is_read_only_when_it_holds_none(tmp_path):
    uri = str(tmp_path / "dv")
    DeltaTable.create(uri, SCHEMA, configuration={"delta.enableDeletionVectors": "true"})
    assert delta.files(uri) == []
    with pytest.raises(FileNotFoundError, match="no Delta table"):
        delta.files(str(tmp_path / "nothing"))


def test_compact_then_vacuum_change_no_answer(tmp_path):
    uri = str(tmp_path / "transactions")
    for i in range(6):
        delta.replace(uri, SCHEMA, {f"r{i}": rows(5 + i, gen=i)})
    delta.replace(uri, SCHEMA, {"r0": rows(3, gen=9)})
    query = ("SELECT record_id, count(*), sum(amount), max(gen) FROM read_parquet(?) "
             "GROUP BY 1 ORDER BY 1")
    before = duckdb.connect().execute(query, [delta.files(uri)]).fetchall()
    own = delta.read(uri).sort_by([("record_id", "ascending"), ("id", "ascending")])

    done = delta.compact(uri)
    assert done["files_after"] < done["files_before"] == 6
    assert done["files_removed"] == 6 and done["version_after"] == done["version_before"] + 1
    swept = delta.vacuum(uri, retention_hours=0)
    assert swept["files_removed"] == 7 and swept["bytes_removed"] > 0  # the r0 rewrite too
    assert swept["files_after"] == done["files_after"]

    assert duckdb.connect().execute(query, [delta.files(uri)]).fetchall() == before
    assert delta.read(uri).sort_by([("record_id", "ascending"), ("id", "ascending")]) == own
    on_disk = {p.name for p in Path(uri).glob("*.parquet")}
    assert on_disk == {Path(f).name for f in delta.files(uri)}
    assert delta.compact(uri)["files_removed"] == 0  # nothing left to do
    assert delta.vacuum(uri, retention_hours=0)["files_removed"] == 0


def test_a_table_past_the_clustering_limit_only_has_its_small_files_packed(tmp_path):
    """Re-sorting a table whole spills ~8x its size to the temporary folder (a million
    records' 27 GB of transactions would want ~200 GB): past `cluster_max_bytes`, or past
    what that folder has free, compaction packs the small files instead, rows unchanged,
    and says why."""
    def lake(name: str) -> str:
        uri = str(tmp_path / name)
        for i in (3, 1, 2, 0):  # four writes, each its own small file
            delta.replace(uri, SCHEMA, {f"r{i}": rows(40, gen=i), f"s{i}": rows(30, gen=i)})
        return uri

    whole, packed, refused = lake("whole"), lake("packed"), lake("refused")
    want = delta.read(whole).sort_by([("record_id", "ascending"), ("id", "ascending")])
    assert delta.compact(whole, order_by="record_id", cluster_max_bytes=2**20)["clustered"] \
        == "yes"  # a few KB, within 1 MB

    done = delta.compact(packed, order_by="record_id", cluster_max_bytes=1000)
    assert done["clustered"] == "no: 0.0 GB, over the 0 MB limit"
    assert done["files_removed"] == 4 and done["files_after"] == 1
    old = delta.SPILL_PER_BYTE
    try:  # a temporary folder too small for the sort, whatever this machine has free
        delta.SPILL_PER_BYTE = 2**50
        said = delta.compact(refused, order_by="record_id")["clustered"]
    finally:
        delta.SPILL_PER_BYTE = old
    assert said.startswith("no: 0.0 GB would spill ~") and " GB free" in said

    for uri in (whole, packed, refused):
        got = delta.read(uri)
        assert got.sort_by([("record_id", "ascending"), ("id", "ascending")]) == want
    ids = delta.read(whole, columns=["record_id"])["record_id"].to_pylist()
    assert ids == sorted(ids)  # re-sorted whole: one run of record ids
    assert delta.compact(whole, order_by="record_id")["clustered"] == "not needed"
    assert delta.compact(whole)["clustered"] is None  # a table not kept by record


def test_every_kind_of_write_keeps_row_groups_small_enough_to_skip(tmp_path):
    """A lookup reads its record's row group whole: no write, compaction included, leaves
    one over 128k rows (delta-rs's own default is a million)."""
    import pyarrow.parquet as pq

    uri = str(tmp_path / "transactions")
    many = pa.concat_tables([rows(30_000, gen=i).append_column(
        "record_id", pa.array([f"r{i}"] * 30_000)) for i in range(5)])
    delta.append(uri, SCHEMA, many)  # 150k rows in one commit (a replace writes as it does)
    delta.append(uri, SCHEMA, many.slice(0, 10))
    delta.compact(uri, order_by="record_id")  # the two files rewritten as one
    sizes = [pq.ParquetFile(f.removeprefix("file://")).metadata.row_group(g).num_rows
             for f in delta.files(uri) for g in range(pq.ParquetFile(
                 f.removeprefix("file://")).metadata.num_row_groups)]
    assert sum(sizes) == 150_010
    assert max(sizes) <= 128 * 1024, sizes


def test_a_reader_never_sees_a_record_half_replaced(tmp_path):
    """30 commits replace record r (generation g has 3 + g % 4 rows) while a thread reads it;
    after each commit the writer waits for two more reads, so reads overlap every commit."""
    uri = str(tmp_path / "transactions")
    delta.replace(uri, SCHEMA, {"r": rows(3, gen=0), "other": rows(7)})
    seen: list[tuple[int, ...]] = []
    reads = threading.Condition()
    done = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not done.is_set():
                got = delta.read(uri, record_id="r", columns=["gen"])["gen"].to_pylist()
                with reads:
                    seen.append(tuple(got))
                    reads.notify_all()
        except BaseException as exc:  # noqa: BLE001  (reported by the test below)
            errors.append(exc)
            with reads:
                reads.notify_all()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for gen in range(1, 31):
            delta.replace(uri, SCHEMA, {"r": rows(3 + gen % 4, gen=gen)})
            with reads:
                target = len(seen) + 2
                assert reads.wait_for(lambda t=target: len(seen) >= t or errors, timeout=120)
    finally:
        done.set()
        thread.join(timeout=60)
    assert not errors, errors
    for gens in seen:
        assert gens, "a read found the record with no rows"
        assert len(set(gens)) == 1, f"a read mixed generations {sorted(set(gens))}"
        assert len(gens) == 3 + gens[0] % 4
    assert {g[0] for g in seen} >= {30}
    assert len(of(delta.read(uri), "other")) == 7


def race(tmp_path: Path, uri: str, mode: str) -> list[int]:
    """Two processes write 20 times each into `uri` at once; the versions they committed."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-m", "tests.resources.delta_writer", uri, mode,
                               rid, str(go)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rid in ("left", "right")]
    go.touch()
    versions = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        versions += [int(line) for line in out.split()]
    return versions


def test_two_processes_replacing_different_records_both_always_land(tmp_path):
    uri = str(tmp_path / "transactions")  # created by whichever writer comes first
    versions = race(tmp_path, uri, "replace")
    assert len(set(versions)) == 40
    table = delta.read(uri)
    for rid in ("left", "right"):
        assert [r["gen"] for r in of(table, rid)] == [19] * (2 + 19 % 3)
    writes = [h for h in DeltaTable(uri).history() if h["operation"] == "WRITE"]
    assert len(writes) == 40  # no commit lost, none doubled


def test_two_processes_replacing_the_same_record_retry_and_both_land(tmp_path):
    """Overwrites of the same rows conflict in delta-rs (CommitFailedError): replace runs the
    losing write again on the new version, so every commit lands and the record ends whole."""
    uri = str(tmp_path / "transactions")
    assert len(set(race(tmp_path, uri, "contend"))) == 40
    gens = [r["gen"] for r in of(delta.read(uri), "shared")]
    assert len(set(gens)) == 1 and gens[0] in (19, 119) and len(gens) == 2 + gens[0] % 3
    assert len([h for h in DeltaTable(uri).history() if h["operation"] == "WRITE"]) == 40


def test_concurrent_appends_both_land(tmp_path):
    uri = str(tmp_path / "balances")
    versions = race(tmp_path, uri, "append")
    assert len(set(versions)) == 40
    table = delta.read(uri)
    for rid in ("left", "right"):
        assert sorted(r["gen"] for r in of(table, rid)) == sorted(list(range(20)) * 2)


def test_an_s3_table_on_moto(s3_endpoint):  # noqa: F811
    import pyarrow.fs as pafs

    # moto checks signatures (tests/s3.py): the fixture put its one accepted key in AWS_*
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", region="us-east-1",
                           access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=secret,
                           allow_bucket_creation=True)
    fs.create_dir("lake-bucket")
    uri = f"s3://lake-bucket/lake/transactions?endpoint_override={s3_endpoint}&scheme=http"
    delta.replace(uri, SCHEMA, {"a": rows(3), "b": rows(2)})
    delta.replace(uri, SCHEMA, {"a": rows(1, gen=1)})  # rewrites b's rows beside a's: 1 file
    delta.replace(uri, SCHEMA, {"c": rows(1)})
    assert [r["gen"] for r in of(delta.read(uri), "a")] == [1]
    assert delta.read(uri, record_id="b").num_rows == 2
    # several records' rows and counts are read through DuckDB over the same S3 client
    assert sorted(delta.read(uri, record_id=["b", "c", "z"])["record_id"].to_pylist()) == \
        ["b", "b", "c"]
    assert delta.count_rows(uri, ["a", "b", "z"]) == {"a": 1, "b": 2}
    listed = delta.files(uri)
    assert listed and all(f.startswith("s3://lake-bucket/lake/transactions/") for f in listed)
    sizes = [fs.get_file_info(f.split("://", 1)[1].split("?", 1)[0]).size for f in listed]
    assert sizes == sorted(sizes, reverse=True)  # largest first: URIs and log paths matched
    assert len(listed) == 2 and delta.compact(uri)["files_after"] == 1
    assert delta.vacuum(uri, retention_hours=0)["files_removed"] == 3
    assert sum(delta.read(uri)["amount"].to_pylist()) == Decimal("40.04")

    assert delta.read(f"s3://lake-bucket/none?endpoint_override={s3_endpoint}&scheme=http") \
        is None
    with pytest.raises(Exception) as caught:  # noqa: B017  (whatever delta-rs raises)
        delta.read(f"s3://no-such-bucket/t?endpoint_override={s3_endpoint}&scheme=http")
    assert secret not in str(caught.value) and secret not in repr(caught.value)
    with pytest.raises(ValueError, match="credentials come from") as caught:
        delta.read(f"s3://lake-bucket/t?secret_key={secret}")
    assert secret not in str(caught.value)


def test_a_day_window_on_a_date_column(tmp_path):
    schema = pa.schema([("record_id", pa.string()), ("trans_date", pa.date32()),
                        ("amount", MONEY)])
    days = [date(2025, 1, d) for d in (1, 2, 3)]
    part = pa.table({"trans_date": pa.array(days), "amount": pa.array([Decimal(1)] * 3, MONEY)})
    uri = str(tmp_path / "t")
    delta.replace(uri, schema, {"a": part})
    delta.replace(uri, schema, {"a": part.slice(2)}, window={"a": date(2025, 1, 2)})
    assert [r["trans_date"] for r in of(delta.read(uri), "a")] == [days[0], days[2]]


def test_vacuum_removes_what_a_run_killed_mid_commit_left(tmp_path):
    """Found by the chaos suite: a writer SIGKILLed while it wrote a data file or its commit
    leaves them under object_store's staging names (`part-...parquet#1`, `_delta_log/
    N.json#1`), which no version names and Delta's own vacuum never removed. Past the
    retention the lake's vacuum does; younger ones (a writer may still be at work) stay."""
    uri = str(tmp_path / "transactions")
    delta.replace(uri, SCHEMA, {"r": rows(3)})
    table = Path(uri)
    old = [table / "part-00000-dead-c000.zstd.parquet#1",
           table / "_delta_log" / "00000000000000000001.json#1"]
    young = table / "part-00001-live-c000.zstd.parquet#1"
    for path in [*old, young]:
        path.write_bytes(b"half a file")
    week_ago = time.time() - 8 * 24 * 3600
    for path in old:
        os.utime(path, (week_ago, week_ago))
    swept = delta.vacuum(uri, retention_hours=168)
    assert swept["files_removed"] == 2 and swept["bytes_removed"] == 2 * len(b"half a file")
    assert [p.exists() for p in [*old, young]] == [False, False, True]
    delta.replace(uri, SCHEMA, {"r": rows(4)})  # the log goes on past the leftover's number
    assert delta.read(uri).num_rows == 4


def test_only_a_failure_an_erasure_cut_under_is_tried_again(tmp_path):
    """A write or read that fails is tried again (`_retrying`, `_reading`) only when an
    erasure's cut took the log it read: the failure names a version before the cut, or the
    cut was made since the try began. Any other failure is told at once."""
    from deltalake.exceptions import DeltaError

    uri = str(tmp_path / "t")
    for i in range(3):
        delta.replace(uri, SCHEMA, {f"r{i}": rows(2)})
    began = time.time()
    assert not delta._cut_since(uri, DeltaError("Invalid table version: 1"), began)  # no cut
    delta.erase(uri, ["r0"])
    cut = delta._cut_at(uri)[0]
    after = time.time() + 60  # a try that began well after the cut
    assert delta._cut_since(uri, DeltaError(f"Invalid table version: {cut - 1}"), after)
    assert delta._cut_since(uri, OSError(f"{uri}/_delta_log/{cut - 1:020d}.json not found"),
                            after)
    assert delta._cut_since(uri, DeltaError("Generic error"), began)  # cut since it began
    assert not delta._cut_since(uri, DeltaError(f"Invalid table version: {cut}"), after)
    assert not delta._cut_since(uri, DeltaError("Generic error"), after)
    assert not delta._cut_since(uri, ValueError(f"Invalid table version: {cut - 1}"), began)
