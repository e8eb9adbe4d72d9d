"""The warehouse: views over the lake agree with the sandbox's own data, and publishing is atomic.

The numbers are checked against an independent computation in pandas over what the sandbox
served over HTTP, never against the same SQL.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.warehouse import build, load_views
from resources.lake import Lake

UTC = dt.UTC
TS = pa.timestamp("ms", tz="UTC")


# -- the lake, filled from a real sandbox over HTTP -------------------------------------------

def _pages(api, path: str, body: dict, key: str) -> list[dict]:
    items, page = [], 1
    while True:
        for _ in range(100):  # the product may still be processing
            r = api.post(path, json={**body, "page": page, "limit": 100})
            if r.status_code != 400 or "NOT_READY" not in r.text:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        items += data[key]
        if not data["pagination"]["hasNextPage"]:
            return items
        page += 1


def _ts(values) -> pa.Array:
    return pa.array(values, pa.string()).cast(TS)


def transactions_table(lines: list[dict]) -> pa.Table:
    amount = [(t["credit"] or 0) - (t["debit"] or 0) for t in lines]
    return pa.table({
        "transaction_id": [t["_id"] for t in lines],
        "account_id": [t["account"] for t in lines],
        "customer_id": [t["customer"] for t in lines],
        "trans_date": _ts([t["trans_date"] for t in lines]),
        "cleared_date": _ts([t["cleared_date"] for t in lines]),
        "debit": pa.array([t["debit"] for t in lines], pa.float64()),
        "credit": pa.array([t["credit"] for t in lines], pa.float64()),
        "amount": pa.array(amount, pa.float64()),
        "balance": pa.array([t["balance"] for t in lines], pa.float64()),
        "currency": [t["currency"] for t in lines],
        "narration": [t["notes"]["desc"] for t in lines],
        "topics": pa.array([t["notes"]["topics"] for t in lines], pa.list_(pa.string())),
        "ref": [t["ref"] for t in lines],
        "code": [t["code"] for t in lines],
        "env": [t["env"] for t in lines],
        "created_at": _ts([t["created_at"] for t in lines]),
    })


def periodic_table(balances: list[dict]) -> pa.Table:
    rows = [(b["account"], p["date"], p["amount"], led["amount"])
            for b in balances
            for p, led in zip(b["periodic"]["available_balance"],
                              b["periodic"]["ledger_balance"], strict=True)]
    return pa.table({
        "account_id": [r[0] for r in rows],
        "date": pa.array([dt.date.fromisoformat(r[1]) for r in rows], pa.date32()),
        "available_balance": pa.array([r[2] for r in rows], pa.float64()),
        "ledger_balance": pa.array([r[3] for r in rows], pa.float64()),
    })


def history_table(balances: list[dict], fetched_at: dt.datetime, shift: float = 0.0) -> pa.Table:
    return pa.table({
        "account_id": [b["account"] for b in balances],
        "fetched_at": pa.array([fetched_at] * len(balances), TS),
        "available_balance": pa.array([b["available_balance"] + shift for b in balances]),
        "ledger_balance": pa.array([b["ledger_balance"] + shift for b in balances]),
        "currency": [b["currency"] for b in balances],
        "source": ["manual"] * len(balances),
        "service_updated_at": _ts([b["last_updated"] for b in balances]),
    })


@pytest.fixture(scope="module")
def sandbox_lake(shared_sandbox, tmp_path_factory):
    """A lake of three records fetched from the sandbox, and the warehouse over it."""
    root = tmp_path_factory.mktemp("lake")
    lake = Lake(root=str(root / "lake"))
    served: dict[str, dict] = {}
    with shared_sandbox.api() as api:
        made = api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 2, "months": 3, "volume": 6, "seed": 1},
            {"accounts": 1, "months": 2, "volume": 3, "seed": 2, "account_type": "business"},
            {"accounts": 3, "months": 1, "volume": 2, "seed": 3},
        ]})
        assert made.status_code == 200, made.text
        for c in made.json()["data"]["customers"]:
            record = c["record"]
            lines = _pages(api, "transactions/get", {"record": record}, "transaction")
            balances = _pages(api, "balance/get", {"record": record}, "balance")
            served[record] = {"transactions": lines, "balances": balances}
            lake.write_partition("transactions", record, transactions_table(lines))
            lake.write_partition("balance_periodic", record, periodic_table(balances))
            now = dt.datetime.now(UTC).replace(microsecond=0)
            lake.write_partition("balance_history", record, pa.concat_tables([
                history_table(balances, now - dt.timedelta(days=1), shift=-1000.0),
                history_table(balances, now),
            ]))
    target = root / "warehouse.duckdb"
    views = build(lake.root, target)
    return target, views, served


def query(path: Path, sql: str) -> pd.DataFrame:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.sql(sql).df()


def served_lines(served: dict) -> pd.DataFrame:
    frames = []
    for record, got in served.items():
        df = pd.DataFrame(got["transactions"])
        df["record_id"] = record
        frames.append(df)
    df = pd.concat(frames, ignore_index=True).rename(columns={"account": "account_id"})
    df["trans_date"] = pd.to_datetime(df["trans_date"], utc=True)
    df["day"] = df["trans_date"].dt.tz_convert("UTC").dt.date
    return df


def test_views_built_for_tables_present(sandbox_lake):
    _, views, _ = sandbox_lake
    assert set(views) == {"transactions", "monthly_cashflow", "daily_balances",
                          "balance_history", "balances"}


def test_transactions_view_is_every_line_with_its_record(sandbox_lake):
    target, _, served = sandbox_lake
    got = query(target, "select record_id, transaction_id from transactions")
    want = {(r, t["_id"]) for r, s in served.items() for t in s["transactions"]}
    assert len(got) == len(want) > 100
    assert set(got.itertuples(index=False, name=None)) == want


def test_daily_balances_equal_the_transactions_end_of_day_balance(sandbox_lake):
    target, _, served = sandbox_lake
    got = query(target, "select * from daily_balances").set_index(["account_id", "date"])
    got.index = got.index.set_levels(pd.to_datetime(got.index.levels[1]).date, level=1)
    assert not got.index.duplicated().any()

    lines = served_lines(served).sort_values(["trans_date", "_id"])
    eod = lines.groupby(["account_id", "day"])["balance"].last()
    checked = 0
    for account, series in eod.groupby(level=0):
        series = series.droplevel(0)
        days = pd.date_range(series.index.min(), series.index.max(), freq="D").date
        implied = series.reindex(days).ffill()  # the last line's balance until the next line
        mine = got.loc[account].reindex(days)
        assert mine["balance"].notna().all(), f"{account}: a day is missing"
        np.testing.assert_allclose(mine["balance"].to_numpy(), implied.to_numpy(), atol=0.005)
        has_lines = pd.Series(days).isin(series.index).to_numpy()
        assert (mine["source"].to_numpy()[has_lines] == "transactions").all()
        assert (~mine["carried_forward"].to_numpy()[has_lines]).all()
        checked += len(days)
    assert checked > 30


def test_daily_balances_take_the_periodic_history_on_days_without_lines(sandbox_lake):
    target, _, served = sandbox_lake
    got = query(target, "select account_id, date, balance, available_balance, source "
                        "from daily_balances")
    got["date"] = pd.to_datetime(got["date"]).dt.date
    periodic = pd.DataFrame([
        {"account_id": b["account"], "date": dt.date.fromisoformat(p["date"]),
         "amount": p["amount"]}
        for s in served.values() for b in s["balances"]
        for p in b["periodic"]["ledger_balance"]])
    lines = served_lines(served)
    with_lines = set(zip(lines["account_id"], lines["day"], strict=True))
    quiet = periodic[[k not in with_lines for k in zip(periodic["account_id"], periodic["date"],
                                                       strict=True)]]
    merged = quiet.merge(got, on=["account_id", "date"], how="left")
    assert len(merged) > 0
    assert (merged["source"] == "periodic").all()
    np.testing.assert_allclose(merged["balance"], merged["amount"], atol=0.005)
    np.testing.assert_allclose(merged["available_balance"], merged["amount"], atol=0.005)
    # every account runs from the first day anyone knows to the last, without gaps
    spans = got.groupby("account_id")["date"].agg(["min", "max", "count"])
    assert ((spans["max"] - spans["min"]).map(lambda d: d.days + 1) == spans["count"]).all()
    first = pd.concat([periodic.groupby("account_id")["date"].min(),
                       lines.groupby("account_id")["day"].min()], axis=1).min(axis=1)
    assert (spans["min"] == first.loc[spans.index]).all()


def test_monthly_cashflow_sums_match_the_transactions(sandbox_lake):
    target, _, served = sandbox_lake
    got = query(target, "select * from monthly_cashflow")
    lines = served_lines(served)
    lines["month"] = lines["trans_date"].dt.tz_convert("UTC").dt.tz_localize(None) \
        .dt.to_period("M").dt.start_time.dt.date
    want = lines.groupby(["account_id", "month"]).agg(
        transactions=("_id", "size"), inflow=("credit", "sum"), outflow=("debit", "sum"))
    want["net"] = want["inflow"] - want["outflow"]
    got["month"] = pd.to_datetime(got["month"]).dt.date
    got = got.set_index(["account_id", "month"]).loc[want.index]
    assert len(got) == len(want) >= 3
    assert (got["transactions"].to_numpy() == want["transactions"].to_numpy()).all()
    for col in ("inflow", "outflow", "net"):
        np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), atol=0.006)
    # and the months add up to the whole history
    assert abs(got["net"].sum() - (lines["credit"].fillna(0) - lines["debit"].fillna(0)).sum()) < 0.01


def test_balances_are_the_latest_snapshot(sandbox_lake):
    target, _, served = sandbox_lake
    got = query(target, "select account_id, ledger_balance from balances").set_index("account_id")
    history = query(target, "select count(*) as n from balance_history")["n"][0]
    want = {b["account"]: b["ledger_balance"] for s in served.values() for b in s["balances"]}
    assert history == 2 * len(want)
    assert got["ledger_balance"].to_dict() == pytest.approx(want)


# -- the lake built by hand: which views, and publishing --------------------------------------

def accounts_table(ids: list[str]) -> pa.Table:
    return pa.table({"account_id": ids, "nuban": [f"{i:010d}" for i in range(len(ids))],
                     "name": ids, "created_at": pa.array([dt.datetime(2025, 1, 1, tzinfo=UTC)]
                                                        * len(ids), TS)})


def test_only_views_whose_tables_exist(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    target = tmp_path / "w.duckdb"
    assert build(lake.root, target) == []
    lake.write_partition("accounts", "r1", accounts_table(["a"]))
    assert build(lake.root, target) == ["accounts"]
    lake.write_partition("balance_periodic", "r1", pa.table({
        "account_id": ["a", "a"],
        "date": pa.array([dt.date(2025, 1, 1), dt.date(2025, 1, 3)], pa.date32()),
        "available_balance": [5.0, 7.0], "ledger_balance": [5.0, 7.0]}))
    # daily_balances can stand on the periodic history alone
    assert set(build(lake.root, target)) == {"accounts", "daily_balances"}
    got = query(target, "select date, balance, source, carried_forward from daily_balances "
                        "order by date")
    assert got["balance"].tolist() == [5.0, 5.0, 7.0]
    assert got["carried_forward"].tolist() == [False, True, False]
    assert set(got["source"]) == {"periodic"}
    # views that read other views wait for them: balances needs balance_history
    names = {v.name for v in load_views()}
    assert {"accounts", "balances", "balance_history", "daily_balances", "transactions",
            "monthly_cashflow", "income_summary", "income_streams", "identity", "payments",
            "records"} <= names
    order = [v.name for v in load_views()]
    assert order.index("balance_history") < order.index("balances")
    assert order.index("transactions") < order.index("monthly_cashflow")


def test_record_id_from_the_folder_stays_a_string(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write_partition("accounts", "000123", accounts_table(["a"]))
    lake.write_partition("accounts", "r2", accounts_table(["b", "c"]).drop(["nuban"]))
    build(lake.root, tmp_path / "w.duckdb")
    got = query(tmp_path / "w.duckdb", "select record_id, account_id, nuban from accounts "
                                       "order by account_id")
    assert got["record_id"].tolist() == ["000123", "r2", "r2"]  # not 123
    assert got["nuban"].isna().tolist() == [False, True, True]  # union_by_name


def test_records_view_reads_the_unpartitioned_table(tmp_path):
    root = tmp_path / "lake"
    (root / "records").mkdir(parents=True)
    pq.write_table(pa.table({
        "record_id": ["r1", "r2", "r3"],
        "status": ["connected", "disconnected", "reauth_required"],
        "last_callback_at": pa.array([dt.datetime(2025, 1, 1, tzinfo=UTC)] * 3, TS),
        "last_method": ["TRANSACTIONS", "USER_DISCONNECT", "USER_REAUTH"],
        "last_code": ["TRANSACTIONS_SUCCESS", "USER_DISCONNECTED", "REAUTH_REQUIRED"],
    }), root / "records" / "part-0.parquet")
    assert build(root, tmp_path / "w.duckdb") == ["records"]
    got = query(tmp_path / "w.duckdb", "select record_id, is_connected, needs_reauth "
                                       "from records order by record_id")
    assert got["is_connected"].tolist() == [True, False, False]
    assert got["needs_reauth"].tolist() == [False, False, True]


def test_a_view_that_fails_leaves_the_published_file_as_it_was(tmp_path, monkeypatch):
    import assets.warehouse as wh

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write_partition("accounts", "r1", accounts_table(["a"]))
    target = tmp_path / "w.duckdb"
    build(lake.root, target)
    before = target.read_bytes()
    sql_dir = tmp_path / "sql"
    sql_dir.mkdir()
    (sql_dir / "accounts.sql").write_text(
        "create view accounts as select no_such_column from {lake:accounts};")
    monkeypatch.setattr(wh, "SQL_DIR", sql_dir)
    with pytest.raises(RuntimeError, match="view accounts .*no_such_column"):
        build(lake.root, target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


READER = r"""
import json, sys, time, duckdb
path, stop = sys.argv[1], sys.argv[2]
import os
seen = []
while not os.path.exists(stop):
    try:
        with duckdb.connect(path, read_only=True) as con:
            views = sorted(r[0] for r in con.execute("select view_name from duckdb_views() "
                                                  "where not internal").fetchall())
            n = con.execute("select count(*) from accounts").fetchone()[0]
        seen.append([views, n])
    except Exception as exc:
        seen.append(["error", repr(exc)])
print(json.dumps(seen))
"""


def test_readers_never_block_a_refresh_nor_see_half_a_file(tmp_path):
    small, big = Lake(root=str(tmp_path / "small")), Lake(root=str(tmp_path / "big"))
    small.write_partition("accounts", "r1", accounts_table(["a"]))
    big.write_partition("accounts", "r1", accounts_table(["a", "b", "c"]))
    big.write_partition("balance_periodic", "r1", pa.table({
        "account_id": ["a"], "date": pa.array([dt.date(2025, 1, 1)], pa.date32()),
        "available_balance": [1.0], "ledger_balance": [1.0]}))
    target = tmp_path / "w.duckdb"
    build(small.root, target)

    # an analyst holds the published file open, read-only, through a rebuild
    held = duckdb.connect(str(target), read_only=True)
    try:
        assert build(big.root, target) == ["accounts", "daily_balances"]
        assert held.execute("select count(*) from accounts").fetchone()[0] == 1  # the old file
    finally:
        held.close()

    # other processes open the file again and again while it is rebuilt twenty times
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(target), str(stop)],
                              stdout=subprocess.PIPE, text=True)
    try:
        for i in range(20):
            build((big if i % 2 else small).root, target)
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    seen = json.loads(out)
    assert seen, "the reader never opened the file"
    allowed = [[["accounts"], 1], [["accounts", "daily_balances"], 3]]
    assert [s for s in seen if s not in allowed] == []


def test_the_warehouse_asset_materializes_with_its_resources(tmp_path):
    from dagster import materialize

    from assets.warehouse import Warehouse, warehouse

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write_partition("accounts", "r1", accounts_table(["a", "b"]))
    target = tmp_path / "out" / "w.duckdb"
    result = materialize([warehouse], resources={
        "lake": lake, "warehouse_db": Warehouse(path=str(target))})
    assert result.success
    meta = result.asset_materializations_for_node("warehouse")[0].metadata
    assert meta["views"].value == "accounts"
    assert "transactions" in meta["waiting_for_lake_tables"].value
    assert query(target, "select count(*) as n from accounts")["n"][0] == 2
