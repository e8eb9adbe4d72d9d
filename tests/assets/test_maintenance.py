"""Lake maintenance: compaction and vacuum change no answer, vacuum keeps what the retention
promises and no more, the UI gets the numbers. Real Delta tables on disk; nothing mocked.

delta-rs reads no clock a test can set, so "two hours later" is made by moving the lake back
instead: the log's tombstone times (which vacuum compares with the retention for superseded
files) and file times (for files no commit names) are set two hours earlier."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from dagster import DagsterInstance, DefaultScheduleStatus, Definitions, materialize

from assets.maintenance import MB, lake_maintenance, lake_maintenance_job, nightly_lake_maintenance
from assets.warehouse import LAKE_TABLES
from resources.config import Tuning
from resources.lake import Lake

MONEY = pa.decimal128(18, 2)
# the tables' own columns matter not to maintenance: small ones, money as the lake keeps it
LINES = pa.schema([("transaction_id", pa.string()), ("trans_date", pa.date32()),
                   ("amount", MONEY)])
SNAPSHOTS = pa.schema([("account_id", pa.string()),
                       ("fetched_at", pa.timestamp("us", tz="UTC")), ("ledger_balance", MONEY)])
TABLES = {"transactions": (["transaction_id"], "amount"),  # table -> (row key, money)
          "balance_history": (["fetched_at", "account_id"], "ledger_balance")}
REPO = Path(__file__).resolve().parents[2]
ENV = ("LEDGERLAKE_LAKE_RETENTION_HOURS", "LEDGERLAKE_LAKE_TARGET_MB",
       "LEDGERLAKE_LAKE_CLUSTER_MAX_MB")


def lines(n: int, gen: int) -> pa.Table:
    return pa.table({"transaction_id": [f"t{i}" for i in range(n)],
                     "trans_date": [date(2025, 1, 1) + timedelta(days=i) for i in range(n)],
                     "amount": pa.array([Decimal(f"{gen}{i}.07") for i in range(n)], MONEY)},
                    schema=LINES)


def snapshot(day: int) -> pa.Table:
    return pa.table({"account_id": ["a1", "a2"],
                     "fetched_at": [datetime(2025, 2, day, tzinfo=UTC)] * 2,
                     "ledger_balance": pa.array([Decimal("1000.10") * day, Decimal("0.01")],
                                                MONEY)}, schema=SNAPSHOTS)


@pytest.fixture
def lake(tmp_path) -> Lake:
    """Two tables of several small commits each: four records landed one by one and one
    of them landed again (its first files superseded), and four balance snapshots."""
    lake = Lake(root=str(tmp_path / "lake"))
    for i in range(4):
        lake.replace("transactions", {f"r{i}": lines(3 + i, gen=1)}, LINES)
    lake.replace("transactions", {"r0": lines(5, gen=2)}, LINES)
    for day in range(1, 5):
        lake.append("balance_history", {"r0": snapshot(day), "r1": snapshot(day + 10)},
                    SNAPSHOTS)
    return lake


def answer(lake: Lake, table: str) -> tuple[list[dict], Decimal]:
    """Every row, in order, and the exact sum of the money column, through the Delta reader."""
    key, money = TABLES[table]
    rows = lake.read(table).sort_by([(c, "ascending") for c in ["record_id", *key]])
    return rows.to_pylist(), pc.sum(rows[money]).as_py()


def through_duckdb(lake: Lake, table: str) -> tuple[list[tuple], Decimal]:
    """The same, by DuckDB over the snapshot's files (a reader that knows nothing of Delta)."""
    key, money = TABLES[table]
    con = duckdb.connect()
    files = lake.files(table)
    columns = ", ".join(["record_id", *key])
    rows = con.execute(f"SELECT {columns}, {money} FROM read_parquet(?) ORDER BY {columns}",
                       [files]).fetchall()
    return rows, con.execute(f"SELECT sum({money}) FROM read_parquet(?)", [files]).fetchone()[0]


def on_disk(lake: Lake, table: str) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in Path(lake.table_uri(table)).glob("*.parquet")}


def live(lake: Lake, table: str) -> dict[str, int]:
    return {Path(f).name: Path(f.removeprefix("file://")).stat().st_size
            for f in lake.files(table)}


def run(lake: Lake, **tuning) -> dict:
    """Materialize the pass with the settings `tuning` names (the others their defaults); its
    metadata, the table's rows keyed by table name."""
    result = materialize([lake_maintenance], resources={"lake": lake, "tuning": Tuning(**tuning)},
                         instance=DagsterInstance.ephemeral())
    assert result.success
    [event] = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    meta["tables"] = {r.data["table"]: r.data for r in meta["tables"].records}
    return meta


def age(lake: Lake, table: str, hours: int) -> None:
    """The table as it will look `hours` from now to vacuum (see the module's docstring)."""
    folder = Path(lake.table_uri(table))
    for commit in (folder / "_delta_log").glob("*.json"):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        for action in actions:
            if "remove" in action:
                action["remove"]["deletionTimestamp"] -= hours * 3_600_000
        commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    # a checkpoint (compaction writes one) would be read instead of the commits: the commits
    # it summarizes are all still there, so the table reads the same without it
    for checkpoint in (folder / "_delta_log").glob("*.checkpoint.parquet"):
        checkpoint.unlink()
    (folder / "_delta_log" / "_last_checkpoint").unlink(missing_ok=True)
    for data in folder.glob("*.parquet"):
        then = data.stat().st_mtime - hours * 3600
        os.utime(data, (then, then))


def test_a_pass_compacts_small_files_and_changes_no_answer(lake):
    before = {t: (answer(lake, t), through_duckdb(lake, t), live(lake, t)) for t in TABLES}
    assert before["transactions"][0][1] == Decimal("182.05") + Decimal("110.35")  # r1..r3, r0

    meta = run(lake)

    for table, (rows, duck, files) in before.items():
        row = meta["tables"][table]
        now = live(lake, table)
        assert row["status"] == "maintained" and row["clustered"] == "yes"  # both by record
        assert row["files_before"] == len(files) >= 4
        assert row["files_after"] == len(now) == 1  # a few KB: one file under 32 MB
        assert row["bytes_before"] == sum(files.values())
        assert row["bytes_after"] == sum(now.values())
        assert row["files_compacted"] == len(files)
        assert row["version_after"] == row["version_before"] + 1 == lake.version(table)
        # a week's retention: nothing superseded is old enough to go, time travel still works
        assert row["files_removed"] == row["bytes_removed"] == 0
        assert set(files) < set(on_disk(lake, table))
        assert lake.read(table, version=1).num_rows > 0  # version 0: the empty table
        # compaction changed no answer, read either way
        assert answer(lake, table) == rows
        assert through_duckdb(lake, table) == duck
        key, money = TABLES[table]
        assert duck[0] == [(r["record_id"], *(r[c] for c in key), r[money]) for r in rows[0]]

    assert meta["files_before"] == sum(len(f) for _, _, f in before.values())
    assert meta["files_after"] == 2 < meta["files_before"]
    assert meta["bytes_after"] == sum(sum(live(lake, t).values()) for t in TABLES)
    assert meta["files_removed"] == meta["bytes_removed"] == 0
    assert (meta["retention_hours"], meta["target_mb"], meta["cluster_max_mb"]) == (168, 32,
                                                                                   4096)
    # the tables not landed yet are listed and left alone: no folder, no version
    absent = sorted(set(LAKE_TABLES) - set(TABLES))
    assert sorted(meta["not_landed"].split(", ")) == absent
    assert all(meta["tables"][t]["status"] == "not landed" for t in absent)
    assert not any(Path(lake.table_uri(t)).exists() for t in absent)

    again = run(lake)  # nothing left to compact: no commit, nothing rewritten
    assert again["files_before"] == again["files_after"] == 2
    assert again["files_compacted"] == 0
    assert all(again["tables"][t]["version_after"] == lake.version(t) for t in TABLES)


def test_a_table_past_the_clustering_limit_is_packed_and_the_pass_says_so(lake):
    """LEDGERLAKE_LAKE_CLUSTER_MAX_MB=0: no table is re-sorted whole (a re-sort spills ~8x a
    table's size), each still has its small files packed, and the UI's row says why."""
    before = {t: answer(lake, t) for t in TABLES}
    meta = run(lake, cluster_max_mb=0)
    assert meta["cluster_max_mb"] == 0
    for table in TABLES:
        row = meta["tables"][table]
        assert row["clustered"] == "no: 0.0 GB, over the 0 MB limit"
        assert row["files_after"] == 1 < row["files_before"]
        assert answer(lake, table) == before[table]
    again = run(lake, cluster_max_mb=0)  # one file each: nothing to pack, nothing to sort
    assert {again["tables"][t]["clustered"] for t in TABLES} == {"not needed"}


def test_vacuum_removes_only_files_older_than_the_retention(lake):
    first = {t: answer(lake, t) for t in TABLES}
    superseded_at = lake.version("transactions") - 1  # before r0 landed again
    run(lake, retention_hours=1)  # compacts; what it superseded is minutes old, so stays
    assert lake.read("transactions", version=superseded_at).num_rows == 3 + 4 + 5 + 6

    for table in TABLES:
        age(lake, table, hours=2)
    folder = Path(lake.table_uri("transactions"))
    some = next(iter(live(lake, "transactions")))
    # files no commit names: one written an hour and a half ago (past the retention, as a
    # write that died), one just now (as a running write's, not committed yet)
    shutil.copy(folder / some, folder / "part-died.parquet")
    then = datetime.now(UTC).timestamp() - 5400
    os.utime(folder / "part-died.parquet", (then, then))
    shutil.copy(folder / some, folder / "part-running.parquet")
    stale = {t: {n: s for n, s in on_disk(lake, t).items()
                 if n not in live(lake, t) and n != "part-running.parquet"} for t in TABLES}

    meta = run(lake, retention_hours=1)

    for table in TABLES:
        row = meta["tables"][table]
        assert row["files_removed"] == len(stale[table]) > 0
        assert row["bytes_removed"] == sum(stale[table].values())
        assert row["files_before"] == row["files_after"] == 1
        assert answer(lake, table) == first[table]
        assert through_duckdb(lake, table)[1] == first[table][1]
        # time travel to before the pass stops working; the current version reads fine
        with pytest.raises(FileNotFoundError):
            lake.read(table, version=1)
    assert set(on_disk(lake, "transactions")) == {*live(lake, "transactions"),
                                                  "part-running.parquet"}
    assert set(on_disk(lake, "balance_history")) == set(live(lake, "balance_history"))
    assert meta["files_removed"] == sum(len(s) for s in stale.values())
    assert meta["bytes_removed"] == sum(sum(s.values()) for s in stale.values())
    assert meta["retention_hours"] == 1


def test_an_empty_lake_is_all_not_landed(tmp_path):
    meta = run(Lake(root=str(tmp_path / "lake")))
    assert {r["status"] for r in meta["tables"].values()} == {"not landed"}
    assert meta["files_before"] == meta["files_after"] == meta["bytes_removed"] == 0
    assert not (tmp_path / "lake").exists()


def test_a_table_that_fails_fails_the_run_after_the_others_are_done(lake):
    log = Path(lake.table_uri("identity")) / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("not a commit\n")

    result = materialize([lake_maintenance], resources={"lake": lake, "tuning": Tuning()},
                         instance=DagsterInstance.ephemeral(), raise_on_error=False)

    assert not result.success
    [failure] = result.get_step_failure_events()
    assert "lake maintenance failed for identity" in str(failure.event_specific_data.error)
    assert len(lake.files("transactions")) == 1  # the others were compacted all the same


@pytest.mark.parametrize("name, bad", [
    ("LEDGERLAKE_LAKE_RETENTION_HOURS", "0"), ("LEDGERLAKE_LAKE_RETENTION_HOURS", "87601"),
    ("LEDGERLAKE_LAKE_RETENTION_HOURS", "-1"), ("LEDGERLAKE_LAKE_RETENTION_HOURS", "1.5"),
    ("LEDGERLAKE_LAKE_RETENTION_HOURS", "7d"), ("LEDGERLAKE_LAKE_RETENTION_HOURS", ""),
    ("LEDGERLAKE_LAKE_RETENTION_HOURS", " 24"), ("LEDGERLAKE_LAKE_TARGET_MB", "0"),
    ("LEDGERLAKE_LAKE_TARGET_MB", "4097"), ("LEDGERLAKE_LAKE_TARGET_MB", "128MB"),
])
def test_bad_settings_are_refused_by_name(monkeypatch, name, bad):
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=f"^{name} must be a whole number from 1 to "):
        Tuning.from_env()


def test_settings_and_their_bounds(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    tuning = Tuning.from_env()
    assert (tuning.retention_hours, tuning.target_mb * MB) == (168, 32 * 1024 * 1024)
    monkeypatch.setenv("LEDGERLAKE_LAKE_RETENTION_HOURS", "87600")
    monkeypatch.setenv("LEDGERLAKE_LAKE_TARGET_MB", "1")
    tuning = Tuning.from_env()
    assert (tuning.retention_hours, tuning.target_mb * MB) == (87600, 1024 * 1024)
    monkeypatch.setenv("LEDGERLAKE_TIMEZONE", "Mars/Olympus_Mons")
    with pytest.raises(ValueError, match="LEDGERLAKE_TIMEZONE='Mars/Olympus_Mons' is not"):
        Tuning.from_env()


def test_a_bad_setting_stops_the_definitions_before_any_table_is_touched(lake, tmp_path):
    """The settings are read once, when the code location loads (each run's process loads it
    too): a bad one stops it there, naming the variable, and no pass starts."""
    versions = {t: lake.version(t) for t in TABLES}
    env = {**os.environ, "PYTHONPATH": str(REPO), "LEDGERLAKE_HOME": str(tmp_path),
           "LEDGERLAKE_LAKE": lake.root, "LEDGERLAKE_LAKE_RETENTION_HOURS": "0"}
    out = subprocess.run([sys.executable, "-c", "import pipeline.definitions"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "LEDGERLAKE_LAKE_RETENTION_HOURS must be a whole number" in out.stderr
    assert {t: lake.version(t) for t in TABLES} == versions


def test_the_nightly_schedule_runs_the_job_of_the_asset(tmp_path):
    """Its clock is LEDGERLAKE_TIMEZONE, as the definitions read it."""
    from pipeline.definitions import defs as loaded

    nightly = loaded.resolve_schedule_def("nightly_lake_maintenance")
    assert nightly.name == "nightly_lake_maintenance"
    assert nightly.job_name == lake_maintenance_job.name == "lake_maintenance_job"
    assert nightly.cron_schedule == "30 2 * * *"
    assert nightly.execution_timezone == os.environ.get("LEDGERLAKE_TIMEZONE", "Africa/Lagos")
    assert nightly_lake_maintenance("UTC").execution_timezone == "UTC"
    assert nightly.default_status == DefaultScheduleStatus.RUNNING
    defs = Definitions(assets=[lake_maintenance], jobs=[lake_maintenance_job],
                       schedules=[nightly], resources={"lake": Lake(root=str(tmp_path)),
                                                       "tuning": Tuning()})
    job = defs.resolve_job_def("lake_maintenance_job")
    assert job.asset_layer.selected_asset_keys == {lake_maintenance.key}
    assert lake_maintenance.group_names_by_key[lake_maintenance.key] == "maintenance"
    assert not lake_maintenance.partitions_def
