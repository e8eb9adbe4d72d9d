"""The derived lake tables (assets/derived.py): each refresh derives again exactly the records
whose source rows moved, as the Delta log names them, and leaves the tables equal to what
deriving every record from scratch gives; an erasure's cut of a source's log loses nothing;
a forgotten record is never derived again. Real Delta tables on disk, nothing mocked."""

from __future__ import annotations

import datetime as dt
from datetime import UTC
from decimal import Decimal

import pyarrow as pa
import pytest

from assets import derived
from pipeline.forget import TABLES as ERASABLE
from pipeline.forget import forget
from resources.lake import Lake
from resources.tables import schema
from resources.wire import MONEY

TS = pa.timestamp("ms", tz="UTC")
ZONE = "Africa/Lagos"
DAY0 = dt.datetime(2025, 3, 1, 9, tzinfo=UTC)


def lines(account: str, days: int, start: int = 0, first: str = "100.00") -> pa.Table:
    """Two posted lines a day on `account` from day `start`, running balances exact."""
    rows, balance = [], Decimal(first)
    for d in range(start, start + days):
        for n, amount in enumerate((Decimal("12.50"), Decimal("-5.25"))):
            balance += amount
            at = DAY0 + dt.timedelta(days=d, hours=n)
            rows.append({"transaction_id": f"{account}-{d}-{n}", "account_id": account,
                         "trans_date": at, "cleared_date": at,
                         "credit": amount if amount > 0 else None,
                         "debit": -amount if amount < 0 else None, "amount": amount,
                         "balance": balance, "currency": "NGN"})
    return pa.Table.from_pylist(rows, schema=schema("transactions"))


def periodic(account: str, days: range) -> pa.Table:
    return pa.Table.from_pylist([{
        "account_id": account, "date": (DAY0 + dt.timedelta(days=d)).date(),
        "available_balance": Decimal("90.00"), "ledger_balance": Decimal("95.00")}
        for d in days], schema=schema("balance_periodic"))


@pytest.fixture
def lake(tmp_path) -> Lake:
    lake = Lake(root=str(tmp_path / "lake"))
    lake.replace("transactions", {f"r{i}": lines(f"a{i}", 5) for i in range(1, 5)},
                 schema("transactions"))
    lake.replace("balance_periodic", {f"r{i}": periodic(f"a{i}", range(-3, 5))
                                      for i in range(1, 5)}, schema("balance_periodic"))
    return lake


def from_scratch(lake: Lake, name: str) -> list[dict]:
    """The derived table as deriving every record from the sources' latest rows gives it."""
    sources = {t: lake.read(t) for t in derived.DERIVED[name].sources}
    rows = derived.derive({t: r for t, r in sources.items() if r is not None}, ZONE, name)
    return sorted(rows.to_pylist(), key=_order)


def stored(lake: Lake, name: str) -> list[dict]:
    table = lake.read(name)
    return [] if table is None else sorted(
        table.select([*schema(name).names, "record_id"]).to_pylist(), key=_order)


def _order(row: dict):
    return (row["record_id"], row["account_id"], str(row.get("date") or row.get("month")))


def same_as_from_scratch(lake: Lake) -> None:
    for name in derived.DERIVED:
        assert stored(lake, name) == from_scratch(lake, name), name


def test_the_log_names_the_records_each_kind_of_write_changed(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    s = schema("transactions")
    v0 = lake.replace("transactions", {"r1": lines("a1", 2), "r2": lines("a2", 2)}, s)
    v1 = lake.replace("transactions", {"r2": lines("a2", 1, start=1)}, s,
                      window={"r2": DAY0 + dt.timedelta(days=1)})  # a window's pull
    assert lake.changed_records("transactions", v0) == (v1, {"r2"})
    v2 = lake.replace_batches("transactions", {"r3": lambda: lines("a3", 2).to_batches()}, s)
    assert lake.changed_records("transactions", v1) == (v2, {"r3"})
    lake.append("balance_periodic", {"r4": periodic("a4", range(2)),
                                     "r5": periodic("a5", range(2))})
    p0 = lake.version("balance_periodic")
    lake.append_rows("balance_periodic", periodic("a6", range(2)).append_column(
        "record_id", pa.array(["r6"] * 2)), schema("balance_periodic"))
    assert lake.changed_records("balance_periodic", -1)[1] == {"r4", "r5", "r6"}
    assert lake.changed_records("balance_periodic", p0)[1] == {"r6"}
    # an append's file of several records compacted and vacuumed away: which it held is lost
    from resources import delta
    p1 = lake.version("balance_periodic")
    lake.append_rows("balance_periodic", pa.concat_tables([periodic(a, range(2)) for a in (
        "a7", "a8")]).append_column("record_id", pa.array(["r7"] * 2 + ["r8"] * 2)),
        schema("balance_periodic"))
    assert lake.changed_records("balance_periodic", p1)[1] == {"r7", "r8"}
    delta.compact(lake.table_uri("balance_periodic"))
    delta.vacuum(lake.table_uri("balance_periodic"), 0)
    assert lake.changed_records("balance_periodic", p1) is None
    # compaction and vacuum change no rows
    lake_compacted = lake.version("transactions")
    delta.compact(lake.table_uri("transactions"))
    assert lake.changed_records("transactions", lake_compacted)[1] == set()
    # an erasure names what it erased, then cuts the log: it cannot say more from before
    v3 = lake.version("transactions")
    cut = lake.erase("transactions", ["r1"])["version"]
    assert lake.changed_records("transactions", cut) == (cut, set())
    assert lake.changed_records("transactions", v3) is None


def test_a_refresh_derives_again_only_what_moved_and_equals_one_from_scratch(lake):
    first = derived.refresh(lake, ZONE)
    assert (first.mode, first.records) == ("all", 4)
    same_as_from_scratch(lake)
    again = derived.refresh(lake, ZONE)
    assert (again.mode, again.records) == ("none", 0)
    # r2 pulls a window again (its last two days, a line gone at source), r3's periodic
    # history grows, r5 is new
    lake.replace("transactions", {"r2": lines("a2", 2, start=3).slice(0, 3)},
                 schema("transactions"), window={"r2": DAY0 + dt.timedelta(days=3)})
    lake.append("balance_periodic", {"r3": periodic("a3", range(5, 7))})
    lake.replace("transactions", {"r5": lines("a5", 3)}, schema("transactions"))
    some = derived.refresh(lake, ZONE)
    assert some.mode == "records" and some.records == 3
    assert sorted(some.sample) == ["r2", "r3", "r5"]
    same_as_from_scratch(lake)
    checked, problems = derived.audit(lake, some, ZONE)
    assert (checked, problems) == (3, [])


def test_another_zone_derives_every_record_again(lake):
    derived.refresh(lake, ZONE)
    assert derived.refresh(lake, "UTC").mode == "all"
    with pytest.raises(ValueError, match="Mars/Olympus"):
        derived.refresh(lake, "Mars/Olympus")


def test_an_erasure_cutting_a_source_log_carries_what_the_cut_took(lake):
    derived.refresh(lake, ZONE)
    lake.replace("transactions", {"r2": lines("a2", 6, first="500.00")}, schema("transactions"))
    forget(lake, ERASABLE, record="r1")  # cuts the transactions' log past r2's change
    done = derived.refresh(lake, ZONE)
    assert done.mode == "records", "the cut lost what r2's commit said"
    assert done.records == 1  # r2; r1, forgotten, is never derived again
    same_as_from_scratch(lake)
    assert "r1" not in {r["record_id"] for r in stored(lake, "daily_balances")}
    assert derived.refresh(lake, ZONE).mode == "none"


def test_a_forgotten_record_is_not_derived_again_from_rows_read_before(lake):
    derived.refresh(lake, ZONE)
    # the refresh reads r4's rows, then forget erases it before the refresh's commit: the
    # refresh erases what it wrote of r4 again
    lake.replace("transactions", {"r4": lines("a4", 6)}, schema("transactions"))
    real = derived._some_rows

    def then_forgotten(*args, **kw):
        rows = real(*args, **kw)
        if not hasattr(then_forgotten, "done"):
            then_forgotten.done = True
            forget(lake, ERASABLE, record="r4")
        return rows

    derived._some_rows = then_forgotten
    try:
        derived.refresh(lake, ZONE)
    finally:
        derived._some_rows = real
    for name in derived.DERIVED:
        assert "r4" not in {r["record_id"] for r in stored(lake, name)}


def test_the_audit_finds_a_day_that_is_not_its_last_line(lake):
    done = derived.refresh(lake, ZONE)
    wrong = lake.read("daily_balances", "r3", schema("daily_balances"))
    balances = wrong["balance"].to_pylist()
    balances[wrong["source"].to_pylist().index("transactions")] = Decimal("1.00")
    wrong = wrong.set_column(wrong.schema.get_field_index("balance"), "balance",
                             pa.array(balances, MONEY))
    done.versions_written["daily_balances"] = lake.replace("daily_balances", {"r3": wrong},
                                                           schema("daily_balances"))
    done.sample = ["r3"]
    checked, problems = derived.audit(lake, done, ZONE)
    assert checked == 1
    assert [(p["kind"], p["balance"]) for p in problems] == [("day", "1.00")]


def test_a_build_that_derived_leaves_nothing_stale_for_the_sensor(lake, tmp_path):
    """The views' `lake_versions` are those of the derived tables the build wrote, not from
    before: otherwise the warehouse sensor sees them moved and asks for a second, empty
    build after every one that derived (found by bench/freshness.py)."""
    from dagster import DagsterInstance, SkipReason, build_sensor_context, materialize

    from assets.warehouse import Warehouse, warehouse
    from pipeline.sensors import warehouse_follows_lake

    with DagsterInstance.ephemeral() as instance:
        resources = {"lake": lake, "warehouse_db": Warehouse(path=str(tmp_path / "w.duckdb"))}
        for _ in range(2):  # the first derives every record; the second, after a landing, some
            assert materialize([warehouse], resources=resources, instance=instance).success
            with build_sensor_context(instance=instance, resources={"lake": lake}) as ctx:
                assert isinstance(warehouse_follows_lake(ctx), SkipReason)
            lake.replace("transactions", {"r1": lines("a1", 6)}, schema("transactions"))


def test_a_source_first_landing_while_the_build_derives_is_in_neither(tmp_path):
    """The views read the sources at the versions the derived tables were derived from, and
    a source absent then stays absent, though it lands before the views are built (the chaos
    suite's reader saw a record's lines with no daily balance: the refresh found no
    transactions, the build read the ones landed since)."""
    import duckdb

    from assets.warehouse import publish

    lake = Lake(root=str(tmp_path / "lake"))
    lake.replace("balance_periodic", {"r1": periodic("a1", range(5))}, schema("balance_periodic"))
    target = tmp_path / "w.duckdb"

    def land_during(said: str) -> None:  # the refresh's progress: after it read the versions
        if lake.version("transactions") is None:
            lake.replace("transactions", {"r1": lines("a1", 5)}, schema("transactions"))

    ask = "select (select count(*) from transactions), (select count(*) from daily_balances)"
    publish(lake.root, target, ZONE, progress=land_during)
    # the daily balances of the periodic balances alone, and no line
    alone = derived.derive({"balance_periodic": lake.read("balance_periodic")}, ZONE,
                           "daily_balances")
    with duckdb.connect(str(target), read_only=True) as con:
        assert con.execute(ask).fetchone() == (0, alone.num_rows)
    publish(lake.root, target, ZONE)  # the next build has the lines, derived
    with duckdb.connect(str(target), read_only=True) as con:
        assert con.execute(ask).fetchone() == (10, len(from_scratch(lake, "daily_balances")))
    same_as_from_scratch(lake)


def test_a_view_built_alone_is_built_with_the_views_of_its_derived_tables(tmp_path):
    """A build of `transactions` alone (its lake table moved past its last build, and not
    `daily_balances`'s) builds the views of the derived tables too: the sources are read at
    the versions those were derived from, so a kept `daily_balances` would have no balance
    for the new lines (the chaos suite's reader saw 191 accounts so)."""
    import duckdb

    from assets.warehouse import publish
    from tests.chaos.readers import movement

    lake = Lake(root=str(tmp_path / "lake"))
    lake.replace("transactions", {"r1": lines("a1", 5)}, schema("transactions"))
    target = tmp_path / "w.duckdb"
    publish(lake.root, target, ZONE)
    lake.replace("transactions", {"r2": lines("a2", 5, first="7.00")}, schema("transactions"))
    built, _ = publish(lake.root, target, ZONE, only={"transactions"})
    assert {"transactions", "daily_balances", "monthly_cashflow"} <= set(built)
    with duckdb.connect(str(target), read_only=True) as con:
        accounts, mismatched, which = con.execute(movement(ZONE)).fetchone()
        shown = con.execute("select distinct record_id from daily_balances").fetchall()
    assert (accounts, mismatched, which) == (2, 0, [])
    assert sorted(shown) == [("r1",), ("r2",)]
    same_as_from_scratch(lake)


def test_a_build_whose_listed_file_is_purged_under_it_builds_again(lake, tmp_path,
                                                                   monkeypatch):
    """`forget` purges files outside the publishers' lock: a build that listed one before
    the purge meets "No files found" binding a view. It lists again and builds, not fails
    (the chaos suite saw `forget`'s own rebuild crash so beside another erasure)."""
    import duckdb

    from assets import warehouse

    real, calls = warehouse._sources, []

    def listed_then_purged(*args):
        sources = real(*args)
        calls.append(1)
        if len(calls) == 1:  # the first listing names a file gone by the time views bind
            gone = str(tmp_path / "lake" / "transactions" / "part-purged.parquet")
            sources["transactions"] = warehouse._relation(
                lake, "transactions", [gone], None)
        return sources

    monkeypatch.setattr(warehouse, "_sources", listed_then_purged)
    said: list[str] = []
    warehouse.publish(lake.root, tmp_path / "w.duckdb", ZONE, progress=said.append)
    assert len(calls) == 2 and any("purged under it" in s for s in said)
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from transactions").fetchone() == (40,)


# -- readers pinned to versions an erasure cuts ----------------------------------------------
# `forget` cuts each table's log and purges files of older snapshots while other processes
# read the versions they pinned: the refresh, the views built on what it derived, the audit.
# Each meets the cut once here, a real one, between pinning and reading.

def _forget_first(lake: Lake, real, record: str = "r1"):
    """`real`, after a real `forget` of `record` on its first call only."""
    def wrapped(*args, **kw):
        if not getattr(wrapped, "done", False):
            wrapped.done = True
            forget(lake, ERASABLE, record=record)
        return real(*args, **kw)

    return wrapped


def test_a_refresh_whose_sources_an_erasure_cuts_under_it_derives_again(lake, monkeypatch):
    """The chaos suite saw `forget`'s own rebuild crash with HistoryGone: another erasure cut
    balance_history between the refresh pinning its version and reading it."""
    derived.refresh(lake, ZONE)
    lake.replace("transactions", {"r2": lines("a2", 6, first="500.00")}, schema("transactions"))
    monkeypatch.setattr(derived, "_scanned", _forget_first(lake, derived._scanned))
    said: list[str] = []
    done = derived.refresh(lake, ZONE, said.append)
    assert any("deriving again" in s for s in said)
    assert done.mode == "records" and done.records == 1  # r2, its change carried by the cut
    same_as_from_scratch(lake)
    assert "r1" not in {r["record_id"] for r in stored(lake, "daily_balances")}


def test_a_publish_whose_derived_versions_an_erasure_cuts_builds_again(lake, tmp_path,
                                                                       monkeypatch):
    """The views read the sources at the versions the refresh derived from: cut between the
    refresh and the build, they are gone, and the publish derives and builds again."""
    import duckdb

    from assets import warehouse

    monkeypatch.setattr(warehouse, "build", _forget_first(lake, warehouse.build))
    said: list[str] = []
    warehouse.publish(lake.root, tmp_path / "w.duckdb", ZONE, progress=said.append)
    assert any("building again" in s for s in said)
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        for view in ("transactions", "daily_balances"):
            assert con.execute(f"select distinct record_id from {view} order by 1"
                               ).fetchall() == [("r2",), ("r3",), ("r4",)], view


def test_the_audit_of_versions_an_erasure_cut_since_checks_none_and_fails_nothing(lake):
    done = derived.refresh(lake, ZONE)
    assert done.sample
    forget(lake, ERASABLE, record="r1")
    assert derived.audit(lake, done, ZONE) == (0, [])
    again = derived.refresh(lake, ZONE)  # nothing moved but the erasure: nothing to derive
    assert again.mode == "none"
