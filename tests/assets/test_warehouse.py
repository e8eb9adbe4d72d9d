"""The warehouse: views over the lake agree with the sandbox's own data, and publishing is atomic.

The numbers are checked against an independent computation in pandas over what the sandbox
served over HTTP, never against the same SQL.
"""

from __future__ import annotations

import datetime as dt
import json
import os
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


# -- the lake, filled by the product assets from a real sandbox over HTTP ---------------------

def _pages(api, path: str, body: dict, key: str) -> list[dict]:
    """Every item of a paged list, waiting while the product is still processing."""
    items, page = [], 1
    while True:
        for _ in range(150):
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


@pytest.fixture(scope="module")
def sandbox_lake(shared_sandbox, tmp_path_factory):
    """Three records materialized by the product assets into a lake, and the warehouse over it.

    Returns the warehouse, its views, the lake root and what the sandbox served over HTTP
    after the runs (balances with their periodic history, every transaction).
    """
    from dagster import DagsterInstance, materialize

    from assets.accounts import accounts
    from assets.balances import balances
    from assets.identity import identity
    from assets.income import income
    from assets.transactions import transactions
    from assets.warehouse import Warehouse, warehouse
    from resources.client import ConnectionClient

    root = tmp_path_factory.mktemp("lake")
    target = root / "warehouse.duckdb"
    resources = {
        "client": ConnectionClient(base_url=shared_sandbox.url, environment="sandbox",
                                   secret_key=shared_sandbox.sandbox_key),
        "lake": Lake(root=str(root / "lake")),
        "warehouse_db": Warehouse(path=str(target)),
    }
    with shared_sandbox.api() as api:
        made = api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 2, "months": 3, "volume": 6, "seed": 1},
            {"accounts": 1, "months": 2, "volume": 3, "seed": 2, "account_type": "business"},
            {"accounts": 3, "months": 1, "volume": 2, "seed": 3},
        ]})
        assert made.status_code == 200, made.text
        record_ids = [c["record"] for c in made.json()["data"]["customers"]]
        for record in record_ids:  # wait until the service has processed the products
            _pages(api, "transactions/get", {"record": record}, "transaction")
        with DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("records", record_ids)
            for record in record_ids:
                out = materialize([accounts, transactions, balances, identity, income],
                                  partition_key=record, instance=instance,
                                  resources=resources)
                assert out.success
            out = materialize([warehouse], instance=instance, resources=resources)
            assert out.success
            views = out.asset_materializations_for_node("warehouse")[0].metadata["views"].text
        served = {record: {
            "balances": _pages(api, "balance/get", {"record": record}, "balance"),
            "transactions": _pages(api, "transactions/get", {"record": record}, "transaction"),
        } for record in record_ids}
    return target, views.split(", "), root / "lake", served


def lake_frame(lake_root: Path, table: str) -> pd.DataFrame:
    """A lake table read with pandas, record_id from the folder (no DuckDB involved)."""
    frames = []
    for part in sorted((lake_root / table).glob("record_id=*/*.parquet")):
        df = pq.read_table(part).to_pandas()
        df["record_id"] = part.parent.name.split("=", 1)[1]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def query(path: Path, sql: str) -> pd.DataFrame:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.sql(sql).df()


def lake_lines(lake_root: Path) -> pd.DataFrame:
    """Posted lines (pending ones carry no balance), with the customer's days (Lagos)."""
    df = lake_frame(lake_root, "transactions")
    df = df[df["balance"].notna()].copy()
    for col in ("debit", "credit", "amount", "balance"):
        df[col] = df[col].astype(float)
    df["day"] = df["trans_date"].dt.tz_convert("Africa/Lagos").dt.date  # value date
    df["posted_day"] = df["cleared_date"].dt.tz_convert("Africa/Lagos").dt.date
    return df


def test_views_built_for_tables_present(sandbox_lake):
    _, views, _, _ = sandbox_lake
    assert set(views) == {"accounts", "transactions", "monthly_cashflow", "daily_balances",
                          "balance_history", "balances", "identity", "income_summary",
                          "income_streams"}


def test_transactions_view_is_every_line_the_sandbox_served(sandbox_lake):
    target, _, _, served = sandbox_lake
    got = query(target, "select record_id, transaction_id from transactions")
    want = {(r, t["_id"]) for r, s in served.items() for t in s["transactions"]}
    assert len(got) > 100
    assert not got.duplicated().any()
    # the sandbox's clock runs on: lines may have appeared after the run, never vanished
    assert set(got.itertuples(index=False, name=None)) <= want
    assert len(want) - len(got) < 10


def test_daily_balances_equal_the_transactions_end_of_day_balance(sandbox_lake):
    target, _, lake_root, _ = sandbox_lake
    got = query(target, "select * from daily_balances")
    got["date"] = pd.to_datetime(got["date"]).dt.date
    got = got.set_index(["account_id", "date"])
    assert not got.index.duplicated().any()

    lines = lake_lines(lake_root).sort_values(["cleared_date", "transaction_id"])
    eod = lines.groupby(["account_id", "posted_day"])["balance"].last()
    checked = 0
    for account, series in eod.groupby(level=0):
        series = series.droplevel(0)
        days = pd.date_range(series.index.min(), series.index.max(), freq="D").date
        implied = series.reindex(days).ffill()  # the last line's balance until the next line
        mine = got.loc[account].reindex(days)
        assert mine["balance"].notna().all(), f"{account}: a day is missing"
        np.testing.assert_allclose(mine["balance"].to_numpy(float), implied.to_numpy(float),
                                   atol=0.005)
        has_lines = pd.Series(days).isin(series.index).to_numpy()
        assert (mine["source"].to_numpy()[has_lines] == "transactions").all()
        assert (~mine["carried_forward"].to_numpy()[has_lines]).all()
        checked += len(days)
    assert checked > 30


def test_daily_balances_agree_with_the_services_own_history(sandbox_lake):
    target, _, lake_root, served = sandbox_lake
    got = query(target, "select account_id, date, balance, available_balance, source "
                        "from daily_balances")
    got["date"] = pd.to_datetime(got["date"]).dt.date
    periodic = pd.DataFrame([
        {"account_id": b["account"], "date": dt.date.fromisoformat(p["date"]),
         "amount": p["amount"]}
        for s in served.values() for b in s["balances"]
        for p in b["periodic"]["ledger_balance"]])
    # the last day of each series may still be running: compare the days before it
    last = periodic.groupby("account_id")["date"].transform("max")
    closed = periodic[periodic["date"] < last].merge(got, on=["account_id", "date"], how="left")
    assert len(closed) > 30
    np.testing.assert_allclose(closed["balance"].astype(float), closed["amount"], atol=0.005)

    # days without lines take the periodic figure, available balance included
    lines = lake_lines(lake_root)
    with_lines = set(zip(lines["account_id"], lines["posted_day"], strict=True))
    quiet = closed[[k not in with_lines
                    for k in zip(closed["account_id"], closed["date"], strict=True)]]
    assert len(quiet) > 0
    assert (quiet["source"] == "periodic").all()
    np.testing.assert_allclose(quiet["available_balance"].astype(float), quiet["amount"],
                               atol=0.005)

    # every account runs from the first day anyone knows to the last, without gaps
    spans = got.groupby("account_id")["date"].agg(["min", "max", "count"])
    assert ((spans["max"] - spans["min"]).map(lambda d: d.days + 1) == spans["count"]).all()
    first = pd.concat([periodic.groupby("account_id")["date"].min(),
                       lines.groupby("account_id")["posted_day"].min()], axis=1).min(axis=1)
    assert (spans["min"] == first.loc[spans.index]).all()


def test_monthly_cashflow_sums_match_the_transactions(sandbox_lake):
    target, _, lake_root, _ = sandbox_lake
    got = query(target, "select * from monthly_cashflow")
    lines = lake_lines(lake_root)
    lines["month"] = lines["day"].map(lambda d: d.replace(day=1))
    want = lines.groupby(["account_id", "month"]).agg(
        transactions=("transaction_id", "size"), inflow=("credit", "sum"),
        outflow=("debit", "sum"))
    want["net"] = want["inflow"] - want["outflow"]
    got["month"] = pd.to_datetime(got["month"]).dt.date
    got = got.set_index(["account_id", "month"])
    assert len(got) == len(want) >= 3
    got = got.loc[want.index]
    assert (got["transactions"].to_numpy() == want["transactions"].to_numpy()).all()
    for col in ("inflow", "outflow", "net"):
        np.testing.assert_allclose(got[col].to_numpy(float), want[col].to_numpy(float),
                                   atol=0.006)
    # and the months add up to the signed amounts of the whole history
    assert abs(got["net"].astype(float).sum() - lines["amount"].sum()) < 0.01


def test_balances_are_the_latest_snapshot(sandbox_lake):
    target, _, lake_root, _ = sandbox_lake
    got = query(target, "select account_id, ledger_balance, fetched_at from balances")
    history = lake_frame(lake_root, "balance_history").sort_values("fetched_at")
    want = history.groupby("account_id")["ledger_balance"].last()
    assert got["account_id"].is_unique
    assert len(got) == len(want) == 6
    assert got.set_index("account_id")["ledger_balance"].astype(float).to_dict() == \
        pytest.approx(want.astype(float).to_dict())
    assert query(target, "select count(*) as n from balance_history")["n"][0] == len(history)


def test_income_and_identity_views_hold_each_record(sandbox_lake):
    target, _, lake_root, _ = sandbox_lake
    ident = query(target, "select record_id, customer_id, bvn from identity")
    assert set(ident["record_id"]) == set(lake_frame(lake_root, "accounts")["record_id"])
    assert ident["bvn"].str.fullmatch(r"\d{11}").all()
    streams = query(target, "select record_id, sum(monthly_amount) as m from income_streams "
                            "group by all").set_index("record_id")["m"]
    want = lake_frame(lake_root, "income_streams").groupby("record_id")["monthly_amount"].sum()
    assert streams.astype(float).to_dict() == pytest.approx(want.astype(float).to_dict())
    summary = query(target, "select record_id, number_of_streams from income_summary")
    assert len(summary) == len(lake_frame(lake_root, "income"))


def test_the_file_opens_in_any_duckdb_from_1_0(sandbox_lake):
    target, _, _, _ = sandbox_lake
    with duckdb.connect() as con:
        con.execute(f"attach '{target}' as w (read_only)")
        tags = con.execute("select tags from duckdb_databases() where database_name = 'w'"
                           ).fetchone()[0]
    assert tags["storage_version"] == "v1.0.0+"


# -- the lake built by hand: which views, and publishing --------------------------------------

def accounts_table(ids: list[str]) -> pa.Table:
    return pa.table({"account_id": ids, "nuban": [f"{i:010d}" for i in range(len(ids))],
                     "name": ids, "created_at": pa.array([dt.datetime(2025, 1, 1, tzinfo=UTC)]
                                                        * len(ids), TS)})


def test_only_views_whose_tables_exist(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    target = tmp_path / "w.duckdb"
    assert build(lake.root, target) == []
    lake.write("accounts", "r1", accounts_table(["a"]))
    assert build(lake.root, target) == ["accounts"]
    lake.write("balance_periodic", "r1", pa.table({
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
    lake.write("accounts", "000123", accounts_table(["a"]))
    lake.write("accounts", "r2", accounts_table(["b", "c"]).drop(["nuban"]))
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
    lake.write("accounts", "r1", accounts_table(["a"]))
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


def test_a_build_clears_what_a_killed_build_left(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "r1", accounts_table(["a"]))
    target = tmp_path / "w.duckdb"
    old = tmp_path / ".w.duckdb.0123abcd.tmp"
    fresh = tmp_path / ".w.duckdb.4567cdef.tmp"  # perhaps a build running right now
    for path in (old, fresh, old.with_name(old.name + ".wal")):
        path.write_bytes(b"half")
    hour_ago = time.time() - 7200
    os.utime(old, (hour_ago, hour_ago))
    os.utime(old.with_name(old.name + ".wal"), (hour_ago, hour_ago))
    build(lake.root, target)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [fresh.name]


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
    small.write("accounts", "r1", accounts_table(["a"]))
    big.write("accounts", "r1", accounts_table(["a", "b", "c"]))
    big.write("balance_periodic", "r1", pa.table({
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
    lake.write("accounts", "r1", accounts_table(["a", "b"]))
    target = tmp_path / "out" / "w.duckdb"
    result = materialize([warehouse], resources={
        "lake": lake, "warehouse_db": Warehouse(path=str(target))})
    assert result.success
    meta = result.asset_materializations_for_node("warehouse")[0].metadata
    assert meta["views"].value == "accounts"
    assert "transactions" in meta["waiting_for_lake_tables"].value
    assert query(target, "select count(*) as n from accounts")["n"][0] == 2


# -- the customer's days, exact money ------------------------------------------------------------

def lagos_lines() -> pa.Table:
    from decimal import Decimal

    from resources.columns import MONEY

    at = [dt.datetime(2024, 2, 29, 23, 30, tzinfo=UTC),  # 00:30 on 1 March in Lagos
          dt.datetime(2024, 3, 1, 23, 30, tzinfo=UTC),   # 00:30 on 2 March in Lagos
          dt.datetime(2024, 3, 2, 12, 0, tzinfo=UTC)]
    money = [Decimal("0.10"), Decimal("0.20"), Decimal("-0.30")]
    return pa.table({
        "transaction_id": ["t1", "t2", "t3"], "account_id": ["a"] * 3,
        "trans_date": pa.array(at, TS), "cleared_date": pa.array(at, TS),
        "debit": pa.array([None, None, Decimal("0.30")], MONEY),
        "credit": pa.array([Decimal("0.10"), Decimal("0.20"), None], MONEY),
        "amount": pa.array(money, MONEY),
        "balance": pa.array([Decimal("1000.10"), Decimal("1000.30"), Decimal("1000.00")], MONEY),
        "currency": ["NGN"] * 3})


def test_days_and_months_are_the_customers_and_money_is_exact(tmp_path):
    """A line at 2024-03-02T00:30+01:00 counts on 2 March (Lagos), not on 1 March (UTC); a
    line at 00:30 on 1 March counts in March, not February; 0.10 + 0.20 - 0.30 is 0."""
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("transactions", "r1", lagos_lines())
    target = tmp_path / "w.duckdb"
    build(lake.root, target)
    days = query(target, "select date::varchar as d, balance::varchar as b from daily_balances "
                         "order by d")
    assert days.values.tolist() == [["2024-03-01", "1000.10"], ["2024-03-02", "1000.00"]]
    months = query(target, "select month::varchar as m, net::varchar as n, transactions "
                           "from monthly_cashflow")
    assert months.values.tolist() == [["2024-03-01", "0.00", 3]]
    exact = query(target, "select sum(amount) = 0 as zero, typeof(sum(amount)) as t "
                          "from transactions")
    assert exact["zero"][0] and exact["t"][0].startswith("DECIMAL")
    # the zone is a setting: in UTC the same lines fall on the 29th, 1st and 2nd
    build(lake.root, target, timezone="UTC")
    days = query(target, "select date::varchar as d from daily_balances order by d")
    assert days["d"].tolist() == ["2024-02-29", "2024-03-01", "2024-03-02"]


def test_an_unknown_time_zone_is_refused_and_changes_nothing(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("transactions", "r1", lagos_lines())
    target = tmp_path / "w.duckdb"
    build(lake.root, target)
    before = target.read_bytes()
    with pytest.raises(ValueError, match="'Mars/Olympus' is not one DuckDB knows"):
        build(lake.root, target, timezone="Mars/Olympus")
    assert target.read_bytes() == before
