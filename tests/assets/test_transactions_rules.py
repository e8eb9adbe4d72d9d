"""The transactions asset's rules on their own: the window, where a pull starts, the weekly
reconcile, which records fail validation."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import dagster as dg
import pyarrow as pa

from assets import transactions as tx
from resources.wire import MONEY

TS = pa.timestamp("ms", tz="UTC")


def rows(*items) -> pa.Table:
    """items: (id, when, amount); the rest of the columns as the lake has them."""
    n = len(items)
    amount = [Decimal(a) for _, _, a in items]
    return pa.table({
        "transaction_id": [i for i, _, _ in items],
        "account_id": ["acc"] * n, "customer_id": ["c"] * n, "bank_id": ["b"] * n,
        "trans_date": pa.array([w for _, w, _ in items], TS),
        "cleared_date": pa.array([w for _, w, _ in items], TS),
        "debit": pa.array([-a if a < 0 else None for a in amount], MONEY),
        "credit": pa.array([a if a > 0 else None for a in amount], MONEY),
        "amount": pa.array(amount, MONEY),
        "balance": pa.array([Decimal("100.00")] * n, MONEY),
        "currency": ["NGN"] * n, "narration": ["x"] * n,
        "topics": pa.array([[]] * n, pa.list_(pa.string())),
        "ref": ["r"] * n, "branch": ["b"] * n, "code": ["POS"] * n, "env": ["e"] * n,
        "created_at": pa.array([w for _, w, _ in items], TS),
        "last_updated": pa.array([w for _, w, _ in items], TS),
        "narration_sealed": pa.nulls(n, pa.binary()),
    }, schema=tx.SCHEMA)


def at(day: int, hour: int = 12) -> dt.datetime:
    return dt.datetime(2026, 3, day, hour, tzinfo=dt.UTC)


def test_the_source_wins_inside_the_window_and_only_there():
    lake = rows(("old", at(1), "1.00"), ("edge", at(10, 0), "2.00"), ("gone", at(11), "3.00"),
                ("moved", at(2), "4.00"), ("kept", at(9, 23), "5.00"))
    fresh = rows(("edge", at(10, 0), "2.50"), ("new", at(12), "6.00"),
                 ("moved", at(10, 6), "4.00"))
    out = tx.apply_window(lake, fresh, dt.date(2026, 3, 10))
    # gone: vanished inside the window; edge: on the window's first instant, so the source's;
    # moved: re-dated into the window, once; kept and old: before the window, untouched
    assert out["transaction_id"].to_pylist() == ["old", "kept", "edge", "moved", "new"]
    assert dict(zip(out["transaction_id"].to_pylist(), out["amount"].to_pylist(),
                    strict=True))["edge"] == Decimal("2.50")


def test_a_full_pull_replaces_everything_and_dedupes_in_date_order():
    lake = rows(("a", at(1), "1.00"), ("b", at(2), "1.00"))
    fresh = rows(("c", at(5), "1.00"), ("b", at(3), "2.00"), ("c", at(4), "3.00"))
    for existing, start in ((lake, None), (None, dt.date(2026, 3, 1)),
                            (lake.slice(0, 0), dt.date(2026, 3, 1))):
        out = tx.apply_window(existing, fresh, start)
        assert out["transaction_id"].to_pylist() == ["b", "c"]  # by date; c's newer copy
        assert out["amount"].to_pylist() == [Decimal("2.00"), Decimal("3.00")]


def test_a_pull_starts_three_days_before_the_last_date_seen():
    assert tx.pull_from(None) is None
    assert tx.pull_from(rows()) is None
    lake = rows(("a", at(1), "1.00"), ("b", at(20, 23), "1.00"), ("c", at(5), "1.00"))
    assert tx.pull_from(lake) == dt.date(2026, 3, 17)
    assert tx.window_start(dt.date(2026, 3, 17)).as_py() == dt.datetime(2026, 3, 17,
                                                                       tzinfo=dt.UTC)


def test_each_record_is_reconciled_once_in_every_period():
    day = dt.date(2026, 11, 2)
    ids = [f"rec{i:03d}" for i in range(700)]
    for every in (1, 3, 7):
        days = {r: [d for d in range(every)
                    if tx.reconciles_on(r, day + dt.timedelta(days=d), every)] for r in ids}
        assert all(len(v) == 1 for v in days.values())  # exactly once per period
        per_day = [sum(1 for v in days.values() if v == [d]) for d in range(every)]
        assert min(per_day) > len(ids) / every * 0.7  # spread, not all on one day
        r = ids[0]
        again = day + dt.timedelta(days=days[r][0] + every)
        assert tx.reconciles_on(r, again, every)  # and again a period later
    assert not any(tx.reconciles_on(r, day, 0) for r in ids)  # 0: never


def test_which_records_a_run_pulls_whole():
    ids = [f"rec{i:02d}" for i in range(30)]
    day = dt.date(2026, 11, 5)
    seen = {}

    @dg.asset
    def probe(context):
        seen["full"] = tx.full_pulls(context, tx.PullConfig(), ids, 7)
        seen["forced"] = tx.full_pulls(context, tx.PullConfig(full_history=True), ids, 7)

    dg.materialize([probe], tags={"ledgerlake/refresh_day": day.isoformat()})
    assert seen["full"] == {r for r in ids if tx.reconciles_on(r, day, 7)}
    assert 0 < len(seen["full"]) < len(ids)
    assert seen["forced"] == set(ids)
    dg.materialize([probe])  # not the schedule's run: no reconcile
    assert seen["full"] == set() and seen["forced"] == set(ids)


def test_validation_names_the_records_that_fail_and_only_those():
    good = rows(("a", at(1), "1.00"))
    bad = rows(("b", at(1), "1.00"))
    bad = bad.set_column(bad.schema.get_field_index("currency"), "currency",
                         pa.array(["XXX"], pa.string()))
    assert tx.bad_records({"r1": good}) == {}
    assert tx.bad_records({"r1": good, "r2": good}) == {}
    out = tx.bad_records({"r1": good, "r2": bad, "r3": good})
    assert list(out) == ["r2"]
    assert out["r2"].startswith("ValidationFailed: transactions of record r2")
    assert "currency" in out["r2"]
    assert list(tx.bad_records({"r2": bad})) == ["r2"]


def test_a_lake_of_one_line_keeps_it_when_a_window_does_not_reach_it():
    lake = rows(("old", at(1), "1.00"))
    out = tx.apply_window(lake, rows(("new", at(12), "2.00")), dt.date(2026, 3, 10))
    assert out["transaction_id"].to_pylist() == ["old", "new"]
    assert tx.pull_from(lake) == dt.date(2026, 2, 26)  # one line is a date seen too


def test_a_record_whose_lines_carry_no_date_is_pulled_whole():
    lake = rows(("a", at(1), "1.00"))
    lake = lake.set_column(lake.schema.get_field_index("trans_date"), "trans_date",
                           pa.array([None], TS))
    assert tx.pull_from(lake) is None
