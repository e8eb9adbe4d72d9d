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
from dagster import TableColumnDep
from deltalake import DeltaTable

from assets.warehouse import build, load_views, publish
from resources.lake import Lake
from tests.conftest import connected, land

UTC = dt.UTC
TS = pa.timestamp("ms", tz="UTC")


# -- the lake, filled by the product assets from a real sandbox over HTTP ---------------------


def published(root, target, *args, **kw) -> list[str]:
    """The warehouse as its asset publishes it: the derived lake tables derived first."""
    return publish(root, target, *args, **kw)[0]

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
    from dagster import materialize

    from assets.accounts import accounts
    from assets.balances import balances
    from assets.identity import identity
    from assets.income import income
    from assets.transactions import transactions
    from assets.warehouse import Warehouse, warehouse
    from resources.client.resource import ConnectionClient
    from resources.config import Tuning
    from resources.inbox.resource import InboxResource

    root = tmp_path_factory.mktemp("lake")
    target = root / "warehouse.duckdb"
    resources = {
        "client": ConnectionClient(base_url=shared_sandbox.url, environment="sandbox",
                                   secret_key=shared_sandbox.sandbox_key),
        "lake": Lake(root=str(root / "lake")),
        "warehouse_db": Warehouse(path=str(target)),
        "tuning": Tuning(),
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
        # one run over the three records, as the sensor starts it
        inbox = InboxResource(path=connected(root / "inbox.sqlite3", record_ids))
        out = land([accounts, transactions, balances, identity, income], record_ids,
                   {**resources, "inbox": inbox})
        assert out.success
        out = materialize([warehouse], resources=resources)
        assert out.success
        views = {m.asset_key.path[-1]: m.metadata  # each view's materialization
                 for m in out.asset_materializations_for_node("warehouse")
                 if m.asset_key.path[0] == "warehouse"}
        served = {record: {
            "balances": _pages(api, "balance/get", {"record": record}, "balance"),
            "transactions": _pages(api, "transactions/get", {"record": record}, "transaction"),
        } for record in record_ids}
    return target, views, root / "lake", served


def lake_frame(lake_root: Path, table: str) -> pd.DataFrame:
    """A lake table read with Delta's own reader, record_id a column (no DuckDB involved)."""
    return DeltaTable(str(lake_root / table)).to_pyarrow_table().to_pandas()


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


def test_every_view_built_over_a_lake_the_assets_filled(sandbox_lake):
    target, views, _, _ = sandbox_lake
    assert set(views) == set(VIEWS)  # payments and records too, empty: none landed
    assert view_columns(target, "payments") == VIEWS["payments"]
    assert query(target, "select count(*) as n from payments")["n"][0] == 0
    # a chart over every record on the views that have one, drawn from the view's rows
    # (after a line saying what it shows: the daily one, which days)
    for name in ("daily_balances", "monthly_cashflow"):
        assert f".\n\n![{name} of every record](data:image/png;base64," in \
            views[name]["summary"].value
    assert "the last 92 days" in views["daily_balances"]["summary"].value
    assert "summary" not in views["payments"]


def test_the_landings_and_checks_views_tell_each_record_of_the_run(sandbox_lake):
    """What the run did to each record, in SQL: a landing per record and product, a verdict
    per record and check, all of one run."""
    target, _, lake_root, _ = sandbox_lake
    records = sorted(set(lake_frame(lake_root, "accounts")["record_id"]))
    landed = query(target, "select record_id, product, outcome, row_count, run_id "
                           "from landings order by all")
    products = ["accounts", "balances", "identity", "income", "transactions"]
    assert list(zip(landed["record_id"], landed["product"], landed["outcome"], strict=True)) \
        == [(r, p, "landed") for r in records for p in products]
    assert landed["run_id"].nunique() == 1
    rows = landed[landed["product"] == "transactions"].set_index("record_id")["row_count"]
    assert rows.to_dict() == lake_frame(lake_root, "transactions").groupby(
        "record_id").size().to_dict()
    checked = query(target, "select record_id, check_name, passed, blocking, run_id "
                            "from checks order by all")
    assert list(zip(checked["record_id"], checked["check_name"], checked["passed"],
                    checked["blocking"], strict=True)) == [
        (r, c, True, b) for r in records for c, b in (
            ("account_has_record", True), ("income_matches_transactions", False),
            ("running_balance_reconciles", True))]
    assert set(checked["run_id"]) == set(landed["run_id"])


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
    ident = query(target, "select record_id, customer_id, bvn, bvn_hash from identity")
    assert set(ident["record_id"]) == set(lake_frame(lake_root, "accounts")["record_id"])
    assert ident["bvn"].str.fullmatch(r"\*{7}\d{4}").all()  # masked: never the number
    assert ident["bvn_hash"].str.fullmatch(r"[0-9a-f]{64}").all()
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


def test_views_built_and_in_order_as_the_lake_fills(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    target = tmp_path / "w.duckdb"
    assert set(published(lake.root, target)) == set(VIEWS)
    lake.write("accounts", "r1", accounts_table(["a"]))
    assert set(published(lake.root, target)) == set(VIEWS)
    assert query(target, "select count(*) as n from accounts")["n"][0] == 1
    lake.write("balance_periodic", "r1", pa.table({
        "account_id": ["a", "a"],
        "date": pa.array([dt.date(2025, 1, 1), dt.date(2025, 1, 3)], pa.date32()),
        "available_balance": [5.0, 7.0], "ledger_balance": [5.0, 7.0]}))
    # daily_balances can stand on the periodic history alone
    published(lake.root, target)
    got = query(target, "select date, balance, source, carried_forward from daily_balances "
                        "order by date")
    assert got["balance"].tolist() == [5.0, 5.0, 7.0]
    assert got["carried_forward"].tolist() == [False, True, False]
    assert set(got["source"]) == {"periodic"}
    # views that read other views are built after them: balances needs balance_history
    assert {v.name for v in load_views()} == set(VIEWS)
    order = [v.name for v in load_views()]
    assert order.index("balance_history") < order.index("balances")


# -- every view always exists, with its documented, typed columns -------------------------------

T = {"": "VARCHAR", "ts": "TIMESTAMP WITH TIME ZONE", "money": "DECIMAL(18,2)", "date": "DATE",
     "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "list": "VARCHAR[]",
     "sum": "DECIMAL(38,2)", "int32": "INTEGER", "blob": "BLOB"}


def columns(spec: str) -> list[tuple[str, str]]:
    """`name name:type ...` as (name, DuckDB type); no type is varchar."""
    return [(c.partition(":")[0], T[c.partition(":")[2]]) for c in spec.split()]


# the lake's tables as docs/lake.md documents them, in the order the assets write them
LAKE = {
    "accounts": "account_id nuban name type currency bank_id customer_id customer_name "
                "balance_id env created_at:ts last_updated:ts",
    "balance_history": "account_id fetched_at:ts available_balance:money ledger_balance:money "
                       "currency source service_updated_at:ts",
    "balance_periodic": "account_id date:date available_balance:money ledger_balance:money",
    "transactions": "transaction_id account_id customer_id bank_id trans_date:ts "
                    "cleared_date:ts debit:money credit:money amount:money balance:money "
                    "currency narration topics:list ref branch code env created_at:ts "
                    "last_updated:ts narration_sealed:blob",
    "income": "income_id customer_id confidence:float number_of_transactions:int "
              "average_monthly_income:money last_year_income:money account_age_months:int "
              "number_of_streams:int past_three_months_total:money past_six_months_total:money "
              "past_twelve_months_total:money past_twelve_months_average:money created_at:ts",
    "income_streams": "stream_id account_ids:list type monthly_amount:money "
                      "number_of_transactions:int source_name source_type first_date:date "
                      "last_date:date total_count:int primary_stream:bool",
    "identity": "customer_id bvn bvn_hash nin nin_hash firstname middlename lastname fullname "
                "birth_year:int32 gender marital_status nationality state_of_origin "
                "state_of_residence lga_of_origin lga_of_residence phones:list emails:list "
                "addresses:list aliases:list sealed:blob",
    "payments": "payment_id callback_type status amount:money fee:money currency ref "
                "debit_account credit_account source interbank_response_code "
                "bank_response_code bank_response_message schedule_interval created_at:ts "
                "last_updated:ts",
    "records": "record_id status status_at:ts last_method last_code last_callback_at:ts "
               + " ".join(f"{p}_code {p}_at:ts" for p in ("auth", "identity", "accounts",
                                                          "balance", "transactions", "income",
                                                          "payment")),
    "erasures": "erasure_id requested_at:ts finished_at:ts subject subject_id record_id "
                "lake_table rows_deleted:int files_purged:int lake_version:int reason",
    "reveals": "revealed_at:ts revealed_by subject subject_id record_id opened:list rows:int",
    "landings": "product run_id landed_at:ts outcome row_count:int fetched_rows:int pull "
                "lake_table lake_version:int error",
    "checks": "product check_name run_id evaluated_at:ts passed:bool blocking:bool "
              "problem_count:int problems",
    "daily_balances": "account_id date:date balance:money available_balance:money source "
                      "carried_forward:bool",
    "monthly_cashflow": "account_id month:date currency transactions:int inflow:money "
                        "outflow:money net:money",
}

# the views as docs/lake.md's table documents them: the lake table's columns, then record_id
# (the lake's column, after the product's), then what the view adds
VIEWS = {
    "accounts": columns(LAKE["accounts"] + " record_id"),
    "balance_history": columns(LAKE["balance_history"] + " record_id"),
    "balances": columns(LAKE["balance_history"] + " record_id"),
    "daily_balances": columns(LAKE["daily_balances"] + " record_id"),
    "transactions": columns(LAKE["transactions"].replace(" narration_sealed:blob", "")
                            + " record_id pending:bool"),
    "monthly_cashflow": columns(LAKE["monthly_cashflow"] + " record_id"),
    "income_summary": columns(LAKE["income"] + " record_id"),
    "income_streams": columns(LAKE["income_streams"] + " record_id"),
    "identity": columns(LAKE["identity"].replace(" sealed:blob", "") + " record_id"),
    "payments": columns(LAKE["payments"] + " record_id amount_kobo:int"),
    "records": columns(LAKE["records"] + " is_connected:bool needs_reauth:bool"),
    "erasures": columns(LAKE["erasures"]),
    "reveals": columns(LAKE["reveals"]),
    "landings": columns(LAKE["landings"] + " record_id"),
    "checks": columns(LAKE["checks"] + " record_id"),
}


def view_columns(target: Path, view: str) -> list[tuple[str, str]]:
    """What `select * from view` answers: its columns and their types."""
    with duckdb.connect(str(target), read_only=True) as con:
        rel = con.sql(f"select * from {view}")
        rel.fetchall()  # it answers, not only binds
        return [(name, str(kind)) for name, kind, *_ in rel.description]


def every_view(target: Path) -> dict[str, list[tuple[str, str]]]:
    with duckdb.connect(str(target), read_only=True) as con:
        names = sorted(r[0] for r in con.execute(
            "select view_name from duckdb_views() where not internal").fetchall())
    return {name: view_columns(target, name) for name in names}


def test_the_documented_columns_are_the_ones_in_the_docs():
    root = Path(__file__).resolve().parents[2]
    lake_doc = (root / "docs" / "lake.md").read_text().splitlines()
    for table, spec in LAKE.items():
        row = next(ln for ln in lake_doc if ln.startswith(f"| `{table}` |"))
        missing = [c for c, _ in columns(spec) if f"`{c}`" not in row
                   and not (c.endswith(("_code", "_at")) and "`<product>_code`" in row)]
        assert missing == [], f"docs/lake.md does not list {missing} for {table}"
    views_doc = "\n".join(lake_doc).split("## The warehouse's views", 1)[1]
    views_doc = views_doc.split("\n## ", 1)[0].splitlines()
    for view, cols in VIEWS.items():
        row = next(ln for ln in views_doc if ln.startswith("| `") and f"`{view}`" in
                   ln.split("|")[1])
        lake_table = {"balances": "balance_history", "income_summary": "income"}.get(view, view)
        told = {c for c, _ in columns(LAKE.get(lake_table, ""))} | {"record_id"} \
            if "lake table" in row or f"as `{lake_table}`" in row else set()
        missing = [c for c, _ in cols if c not in told and f"`{c}`" not in row]
        assert missing == [], f"docs/lake.md's views do not list {missing} for {view}"


def test_every_view_exists_typed_over_an_empty_lake(tmp_path):
    target = tmp_path / "w.duckdb"
    assert set(published(tmp_path / "lake", target)) == set(VIEWS)
    got = every_view(target)
    assert got == VIEWS
    with duckdb.connect(str(target), read_only=True) as con:
        assert con.execute("select count(*) from payments").fetchone()[0] == 0
        assert con.execute("select count(*) from monthly_cashflow").fetchone()[0] == 0


def test_every_view_exists_typed_over_a_lake_of_only_accounts(tmp_path):
    from assets.accounts import SCHEMA

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "r1", pa.Table.from_pylist([
        {"account_id": "a", "nuban": "0123456789", "name": "ADA OBI", "currency": "NGN",
         "created_at": dt.datetime(2025, 1, 1, tzinfo=UTC)}], schema=SCHEMA), schema=SCHEMA)
    target = tmp_path / "w.duckdb"
    assert set(published(lake.root, target)) == set(VIEWS)
    assert every_view(target) == VIEWS
    got = query(target, "select record_id, account_id, nuban from accounts")
    assert got.to_dict("records") == [{"record_id": "r1", "account_id": "a",
                                       "nuban": "0123456789"}]
    assert query(target, "select count(*) as n from daily_balances")["n"][0] == 0


def test_views_over_real_rows_type_as_their_empty_forms(sandbox_lake, tmp_path):
    """The assets' own rows (sandbox_lake), and payments and records rows of their schemas."""
    import shutil
    from decimal import Decimal

    from assets.payments import SCHEMA as PAYMENTS
    from assets.record_status import SCHEMA as RECORDS

    _, _, lake_root, _ = sandbox_lake
    root = tmp_path / "lake"
    shutil.copytree(lake_root, root)
    lake = Lake(root=str(root))
    when = dt.datetime(2025, 2, 1, 9, tzinfo=UTC)
    lake.write("payments", "r1", pa.Table.from_pylist([
        {"payment_id": "p1", "callback_type": "PAYMENT", "status": "successful",
         "amount": Decimal("1234.50"), "fee": Decimal("10.75"), "currency": "NGN",
         "created_at": when}], schema=PAYMENTS), schema=PAYMENTS)
    lake.write("records", None, pa.Table.from_pylist([
        {"record_id": "r1", "status": "connected", "status_at": when}], schema=RECORDS),
        schema=RECORDS)
    full, empty = tmp_path / "full.duckdb", tmp_path / "empty.duckdb"
    published(root, full)
    published(tmp_path / "nothing", empty)
    assert every_view(full) == every_view(empty) == VIEWS
    # forget's and reveal's (tests/pipeline/test_forget.py, test_reveal.py)
    for view in [v for v in VIEWS if v not in ("erasures", "reveals")]:
        n = query(full, f"select count(*) as n from {view}")["n"][0]
        assert n > 0, f"{view} has no rows over the full lake"
    assert query(full, "select amount::varchar as a, amount_kobo from payments").to_dict(
        "records") == [{"a": "1234.50", "amount_kobo": 123450}]


def test_record_ids_that_look_like_numbers_stay_strings(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "000123", accounts_table(["a"]))
    lake.write("accounts", "1e5", accounts_table(["b", "c"]))
    published(lake.root, tmp_path / "w.duckdb")
    got = query(tmp_path / "w.duckdb", "select record_id, account_id, typeof(record_id) as t "
                                       "from accounts order by account_id")
    assert got["record_id"].tolist() == ["000123", "1e5", "1e5"]  # not 123, nor 100000.0
    assert set(got["t"]) == {"VARCHAR"}


def test_rows_written_before_a_column_was_added_read_it_as_null(tmp_path):
    """A table whose schema grew (Delta schema evolution): its older files lack the column,
    and the view reads them with it null (union_by_name), the newer rows with their values."""
    from deltalake import write_deltalake

    lake = Lake(root=str(tmp_path / "lake"))
    uri = lake.table_uri("accounts")
    old = accounts_table(["a"]).drop_columns(["nuban"])
    write_deltalake(uri, old.append_column("record_id", pa.array(["r1"])))
    new = accounts_table(["b", "c"])
    write_deltalake(uri, new.append_column("record_id", pa.array(["r2", "r2"])),
                    mode="append", schema_mode="merge")
    published(lake.root, tmp_path / "w.duckdb")
    got = query(tmp_path / "w.duckdb", "select record_id, account_id, nuban from accounts "
                                       "order by account_id")
    assert got["record_id"].tolist() == ["r1", "r2", "r2"]
    assert got["nuban"].isna().tolist() == [True, False, False]
    assert got["nuban"].tolist()[1:] == ["0000000000", "0000000001"]


def test_records_view_reads_the_table_not_kept_by_record(tmp_path):
    from assets.record_status import SCHEMA as RECORDS

    lake = Lake(root=str(tmp_path / "lake"))
    when = dt.datetime(2025, 1, 1, tzinfo=UTC)
    lake.write("records", None, pa.Table.from_pylist([
        {"record_id": "r1", "status": "connected", "last_callback_at": when,
         "last_method": "TRANSACTIONS", "last_code": "TRANSACTIONS_SUCCESS"},
        {"record_id": "r2", "status": "disconnected", "last_callback_at": when,
         "last_method": "USER_DISCONNECT", "last_code": "USER_DISCONNECTED"},
        {"record_id": "r3", "status": "reauth_required", "last_callback_at": when,
         "last_method": "USER_REAUTH", "last_code": "REAUTH_REQUIRED"},
    ], schema=RECORDS), schema=RECORDS)
    assert "records" in published(lake.root, tmp_path / "w.duckdb")
    assert view_columns(tmp_path / "w.duckdb", "records") == VIEWS["records"]  # one record_id
    got = query(tmp_path / "w.duckdb", "select record_id, is_connected, needs_reauth "
                                       "from records order by record_id")
    assert got["record_id"].tolist() == ["r1", "r2", "r3"]
    assert got["is_connected"].tolist() == [True, False, False]
    assert got["needs_reauth"].tolist() == [False, False, True]


def test_a_view_that_fails_leaves_the_published_file_as_it_was(tmp_path, monkeypatch):
    import assets.views as views

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "r1", accounts_table(["a"]))
    target = tmp_path / "w.duckdb"
    published(lake.root, target)
    before = target.read_bytes()
    sql_dir = tmp_path / "sql"
    sql_dir.mkdir()
    (sql_dir / "accounts.sql").write_text(
        "create view accounts as select no_such_column from {lake:accounts};")
    monkeypatch.setattr(views, "SQL_DIR", sql_dir)
    with pytest.raises(RuntimeError, match="view accounts .*no_such_column"):
        published(lake.root, target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_build_clears_what_a_killed_build_left(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "r1", accounts_table(["a"]))
    target = tmp_path / "w.duckdb"
    old = tmp_path / ".w.duckdb.0123abcd.tmp"
    fresh = tmp_path / ".w.duckdb.4567cdef.tmp"  # a build running right now, in this process
    for path in (old, old.with_name(old.name + ".wal")):
        path.write_bytes(b"half")
    hour_ago = time.time() - 7200
    os.utime(old, (hour_ago, hour_ago))
    os.utime(old.with_name(old.name + ".wal"), (hour_ago, hour_ago))
    with duckdb.connect(str(fresh)):  # DuckDB holds its lock while the file is open
        os.utime(fresh, (hour_ago, hour_ago))
        published(lake.root, target)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [
            fresh.name]


BUILDER = r"""
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("create table t as select range as n from range(1000)")
print("writing", flush=True)
time.sleep(120)
"""


def test_a_build_killed_mid_publish_leaves_nothing_behind(tmp_path):
    """Found by the chaos suite: a warehouse build SIGKILLed while it wrote its new file left
    it behind for an hour. A file no process holds DuckDB's lock on, and nobody wrote for 2 s,
    is a dead build's, and the next build removes it; a live build's file stays."""
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "r1", accounts_table(["a"]))
    target = tmp_path / "w.duckdb"
    dead, live = tmp_path / ".w.duckdb.dead.tmp", tmp_path / ".w.duckdb.live.tmp"
    builders = {p: subprocess.Popen([sys.executable, "-c", BUILDER, str(p)],
                                    stdout=subprocess.PIPE, text=True) for p in (dead, live)}
    try:
        for proc in builders.values():
            assert proc.stdout.readline().strip() == "writing"
        builders[dead].kill()  # SIGKILL mid-build: no cleanup ran
        builders[dead].wait()
        left = sorted(tmp_path.glob(".w.duckdb.*"))
        minute_ago = time.time() - 60
        for path in left:
            os.utime(path, (minute_ago, minute_ago))
        published(lake.root, target)
        kept = sorted(p.name for p in tmp_path.glob(".w.duckdb.*"))
        assert dead.name in [p.name for p in left] and kept == [
            p.name for p in left if p.name.startswith(live.name)]
        assert duckdb.connect(str(target), read_only=True).execute(
            "select count(*) from accounts").fetchone() == (1,)
    finally:
        for proc in builders.values():
            proc.kill()
            proc.wait()


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


@pytest.mark.slow  # tens of seconds: make test-all
def test_readers_never_block_a_refresh_nor_see_half_a_file(tmp_path):
    small, big = Lake(root=str(tmp_path / "small")), Lake(root=str(tmp_path / "big"))
    small.write("accounts", "r1", accounts_table(["a"]))
    big.write("accounts", "r1", accounts_table(["a", "b", "c"]))
    big.write("balance_periodic", "r1", pa.table({
        "account_id": ["a"], "date": pa.array([dt.date(2025, 1, 1)], pa.date32()),
        "available_balance": [1.0], "ledger_balance": [1.0]}))
    target = tmp_path / "w.duckdb"
    published(small.root, target)

    # an analyst holds the published file open, read-only, through a rebuild
    held = duckdb.connect(str(target), read_only=True)
    try:
        assert set(published(big.root, target)) == set(VIEWS)
        assert held.execute("select count(*) from accounts").fetchone()[0] == 1  # the old file
    finally:
        held.close()

    # other processes open the file again and again while it is rebuilt twenty times
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(target), str(stop)],
                              stdout=subprocess.PIPE, text=True)
    try:
        for i in range(20):
            published((big if i % 2 else small).root, target)
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    seen = json.loads(out)
    assert seen, "the reader never opened the file"
    allowed = [[sorted(VIEWS), 1], [sorted(VIEWS), 3]]
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
    made = {m.asset_key: m.metadata for m in result.asset_materializations_for_node("warehouse")}
    metas = {k.path[-1]: m for k, m in made.items() if k.path[0] == "warehouse"}
    assert set(metas) == set(VIEWS)  # each view its own asset
    # and each derived lake table, its check with it
    derived = {k.path[0]: m for k, m in made.items() if len(k.path) == 1}
    assert set(derived) == {"daily_balances", "monthly_cashflow", "latest_balances"}
    assert derived["daily_balances"]["refresh"].value == "all"  # the first: every record
    [check] = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("balance_is_last_line", True)
    meta = metas["accounts"]
    assert meta["lake_tables_not_landed"].value == ""
    assert meta["lake_versions"].value == {"accounts": lake.version("accounts")}
    assert meta["path"].value == str(target.resolve())  # the warehouse file's
    assert metas["transactions"]["lake_tables_not_landed"].value == "transactions"
    assert query(target, "select count(*) as n from accounts")["n"][0] == 2
    # the UI's column table and lineage: a column of the view from the lake's of its name
    assert [c.name for c in meta["dagster/column_schema"].schema.columns][:2] == [
        "account_id", "nuban"]
    deps = meta["dagster/column_lineage"].lineage.deps_by_column
    assert deps["account_id"] == [TableColumnDep("accounts", "account_id")]
    monthly = metas["monthly_cashflow"]["dagster/column_lineage"].lineage.deps_by_column
    assert monthly["inflow"] == [TableColumnDep("monthly_cashflow", "inflow")]  # the lake's
    added = metas["transactions"]["dagster/column_lineage"].lineage.deps_by_column
    assert "pending" not in added  # derived by the view: from no column of its name


def test_a_view_picked_alone_is_rebuilt_alone(tmp_path):
    """Materializing one view rebuilds it over the lake as it is now; the others stay as
    published, reading the snapshot they were built over."""
    from dagster import AssetKey, materialize

    from assets.warehouse import Warehouse, warehouse

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "r1", accounts_table(["a", "b"]))
    target = tmp_path / "w.duckdb"
    resources = {"lake": lake, "warehouse_db": Warehouse(path=str(target))}
    assert materialize([warehouse], resources=resources).success
    lake.write("accounts", "r2", accounts_table(["c"]))
    lake.write("transactions", "r2", pa.table({"transaction_id": ["t1"]}),
               pa.schema([("transaction_id", pa.string())]))
    result = materialize([warehouse], resources=resources,
                         selection=[AssetKey(["warehouse", "accounts"])])
    assert result.success
    assert [m.asset_key.path[-1] for m in result.asset_materializations_for_node(
        "warehouse")] == ["accounts"]
    assert query(target, "select count(*) as n from accounts")["n"][0] == 3
    assert query(target, "select count(*) as n from transactions")["n"][0] == 0  # as built
    with duckdb.connect(str(target), read_only=True) as con:  # described again
        assert con.execute("select comment from duckdb_views() where view_name = "
                           "'accounts'").fetchone()[0]


# -- the customer's days, exact money ------------------------------------------------------------

def lagos_lines() -> pa.Table:
    from decimal import Decimal

    from resources.wire import MONEY

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
    published(lake.root, target)
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
    published(lake.root, target, timezone="UTC")
    days = query(target, "select date::varchar as d from daily_balances order by d")
    assert days["d"].tolist() == ["2024-02-29", "2024-03-01", "2024-03-02"]


def test_an_unknown_time_zone_is_refused_and_changes_nothing(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("transactions", "r1", lagos_lines())
    target = tmp_path / "w.duckdb"
    published(lake.root, target)
    before = target.read_bytes()
    with pytest.raises(ValueError, match="'Mars/Olympus' is not one DuckDB knows"):
        published(lake.root, target, timezone="Mars/Olympus")
    assert target.read_bytes() == before


# -- the views over Delta tables: the committed snapshot, whatever is on disk --------------------

def of(schema: pa.Schema, *rows: dict) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=schema)


def plain(value):
    """A value as compared across readers: times in UTC, lists as tuples."""
    if isinstance(value, dt.datetime):
        return value.astimezone(UTC)
    if isinstance(value, list):
        return tuple(plain(v) for v in value)
    return value


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted((tuple(plain(v) for v in r.values()) for r in table.to_pylist()), key=repr)


def view_rows(target: Path, view: str, columns: list[str] | None = None) -> list[tuple]:
    listed = "*" if columns is None else ", ".join(f'"{c}"' for c in columns)
    with duckdb.connect(str(target), read_only=True) as con:
        return rows_of(con.sql(f"select {listed} from {view}").to_arrow_table())


def every_views_rows(target: Path) -> dict[str, list[tuple]]:
    return {view: view_rows(target, view) for view in VIEWS}


def filled_over_many_commits(lake: Lake) -> None:
    """Every kind of write the assets make, several commits to each table: per-record
    replaces (one record rewritten), appends, a whole-table overwrite."""
    from decimal import Decimal

    from assets.balances import HISTORY, PERIODIC
    from assets.payments import SCHEMA as PAYMENTS
    from assets.publish import CHECKS, LANDINGS
    from assets.record_status import SCHEMA as RECORDS
    from resources.delta import with_record_id

    lake.write("accounts", "r1", accounts_table(["a"]))
    lake.write("accounts", "r2", accounts_table(["b", "c"]))
    lake.write("accounts", "r1", accounts_table(["a", "d"]))
    lines = lagos_lines()
    lake.write("transactions", "r1", lines)
    lake.write("transactions", "r2", lines.slice(0, 2).set_column(
        1, "account_id", pa.array(["b", "b"])))
    lake.replace("transactions", {"r1": lines.slice(1)})
    for day in (1, 2, 3):
        at = dt.datetime(2024, 3, day, 9, tzinfo=UTC)
        lake.append("balance_history", {
            "r1": of(HISTORY, {"account_id": "a", "fetched_at": at, "currency": "NGN",
                               "source": "callback",
                               "available_balance": Decimal(f"{day}00.10"),
                               "ledger_balance": Decimal(f"{day}00.20")}),
            "r2": of(HISTORY, {"account_id": "b", "fetched_at": at, "currency": "NGN",
                               "source": "callback",
                               "available_balance": Decimal("5.00"),
                               "ledger_balance": Decimal("5.00")})}, schema=HISTORY)
    lake.write("balance_periodic", "r1", of(
        PERIODIC, {"account_id": "a", "date": dt.date(2024, 2, 27),
                   "available_balance": Decimal("999.00"), "ledger_balance": Decimal("999.50")}),
        schema=PERIODIC)
    lake.write("payments", "r1", of(PAYMENTS, {
        "payment_id": "p1", "status": "successful", "amount": Decimal("12.34"),
        "created_at": dt.datetime(2024, 3, 1, tzinfo=UTC)}), schema=PAYMENTS)
    for status in ("connected", "reauth_required"):
        lake.write("records", None, of(RECORDS, {"record_id": "r1", "status": status}),
                   schema=RECORDS)
    # what each run noted of its records: a commit per run, as the assets append them
    for n, outcome in enumerate(("landed", "held", "failed")):
        at = dt.datetime(2024, 3, 1 + n, tzinfo=UTC)
        lake.append_rows("landings", pa.Table.from_pylist([
            {"product": "transactions", "run_id": f"run{n}", "landed_at": at,
             "outcome": outcome, "row_count": 3, "record_id": r} for r in ("r1", "r2")],
            schema=with_record_id(LANDINGS)), LANDINGS)
        lake.append_rows("checks", pa.Table.from_pylist([
            {"product": "transactions", "check_name": "running_balance_reconciles",
             "run_id": f"run{n}", "evaluated_at": at, "passed": outcome == "landed",
             "blocking": True, "problem_count": n, "record_id": "r1"}],
            schema=with_record_id(CHECKS)), CHECKS)


def parquet_on_disk(lake: Lake, table: str) -> list[Path]:
    # data files, not the log's checkpoints (compaction writes one)
    return sorted(p for p in Path(lake.table_uri(table)).glob("**/*.parquet")
                  if "_delta_log" not in p.parts)


def test_compaction_and_vacuum_change_no_views_answer(tmp_path):
    from resources import delta

    lake = Lake(root=str(tmp_path / "lake"))
    filled_over_many_commits(lake)
    target = tmp_path / "w.duckdb"
    published(lake.root, target)
    before = every_views_rows(target)
    assert [v for v in VIEWS if not before[v]] == ["income_summary", "income_streams",
                                                   "identity", "erasures",
                                                   "reveals"]  # not filled here
    tables = ["accounts", "transactions", "balance_history", "balance_periodic", "payments",
              "records", "landings", "checks"]
    on_disk = {t: parquet_on_disk(lake, t) for t in tables}

    compacted = {t: delta.compact(lake.table_uri(t)) for t in tables}
    vacuumed = {t: delta.vacuum(lake.table_uri(t), retention_hours=0) for t in tables}
    # the passes did something: small files merged, the files no version needs removed
    assert compacted["balance_history"]["files_after"] == 1 < \
        compacted["balance_history"]["files_before"]
    assert compacted["accounts"]["files_removed"] > 0
    assert sum(v["files_removed"] for v in vacuumed.values()) > len(tables)
    for t in tables:
        left = parquet_on_disk(lake, t)
        assert len(left) == len(lake.files(t)), t  # only the current version's files stay
        assert len(left) < len(on_disk[t]) or t in ("balance_periodic", "payments"), t

    published(lake.root, target)
    assert every_views_rows(target) == before


def test_a_build_reads_the_snapshot_it_was_built_on(tmp_path):
    """Rows replaced after a build are not seen until the next build; a view reads exactly
    the table's current version, not the older versions' files still on disk."""
    lake = Lake(root=str(tmp_path / "lake"))
    lines = lagos_lines()
    lake.write("transactions", "r1", lines)
    lake.write("transactions", "r2", lines.slice(0, 1))
    target = tmp_path / "w.duckdb"
    published(lake.root, target)
    count = "select record_id, count(*) as n from transactions group by 1 order by 1"
    assert query(target, count).values.tolist() == [["r1", 3], ["r2", 1]]

    lake.write("transactions", "r1", lines.slice(2))  # r1 now one line, -0.30
    assert query(target, count).values.tolist() == [["r1", 3], ["r2", 1]]  # until rebuilt
    published(lake.root, target)
    assert query(target, count).values.tolist() == [["r1", 1], ["r2", 1]]
    total = query(target, "select sum(amount)::varchar as s from transactions")["s"][0]
    assert total == "-0.20"  # -0.30 + 0.10: none of r1's replaced rows
    # the replaced rows' file is still on disk: a glob of the folder would read it
    everything = pq.ParquetDataset(parquet_on_disk(lake, "transactions")).read()
    assert everything.num_rows == 5
    assert len(parquet_on_disk(lake, "transactions")) > len(lake.files("transactions"))


VIEW_OF = {"accounts": "accounts", "balance_history": "balance_history",
           "transactions": "transactions", "income": "income_summary",
           "income_streams": "income_streams", "identity": "identity",
           "payments": "payments", "records": "records"}


def views_are_the_tables(lake_root: Path, target: Path) -> list[str]:
    """Each lake table read by Delta's own reader, and by DuckDB over its snapshot's file
    list, holds the rows of its view (the view's own added columns aside); the tables
    compared."""
    lake = Lake(root=str(lake_root))
    compared = []
    for table, view in VIEW_OF.items():
        if lake.version(table) is None:
            continue
        delta_rows = DeltaTable(lake.table_uri(table)).to_pyarrow_table()
        if delta_rows.num_rows == 0:
            continue
        delta_rows = delta_rows.drop_columns(  # sealed values stay out of the views
            [c for c in ("sealed", "narration_sealed") if c in delta_rows.column_names])
        got = view_rows(target, view, delta_rows.column_names)
        assert got == rows_of(delta_rows), view
        listed = ", ".join(f"'{f.removeprefix('file://')}'" for f in lake.files(table))
        with duckdb.connect() as con:
            plain_duckdb = con.sql(f"select * from read_parquet([{listed}])").to_arrow_table()
            plain_duckdb = plain_duckdb.select(delta_rows.column_names)
        assert rows_of(plain_duckdb) == got, table
        compared.append(table)
    return compared


def test_the_views_hold_the_rows_deltas_own_reader_reads(sandbox_lake):
    target, _, lake_root, _ = sandbox_lake
    assert set(views_are_the_tables(lake_root, target)) == {
        "accounts", "balance_history", "transactions", "income", "income_streams", "identity"}


def test_the_views_hold_the_rows_deltas_own_reader_reads_after_many_commits(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    filled_over_many_commits(lake)
    published(lake.root, tmp_path / "w.duckdb")
    assert set(views_are_the_tables(tmp_path / "lake", tmp_path / "w.duckdb")) == {
        "accounts", "balance_history", "transactions", "payments", "records"}


def test_as_of_builds_the_views_over_the_lake_as_it_stood(tmp_path):
    lake = Lake(root=str(tmp_path / "lake"))
    target = tmp_path / "w.duckdb"
    lines = lagos_lines()
    nothing_yet = dt.datetime.now(UTC)
    time.sleep(0.05)
    lake.write("accounts", "r1", accounts_table(["a"]))
    first = lake.write("transactions", "r1", lines)
    time.sleep(0.05)  # commit times are in milliseconds: a time clearly between
    between = dt.datetime.now(UTC)
    time.sleep(0.05)
    lake.write("transactions", "r1", lines.slice(0, 1))
    last = lake.write("transactions", "r2", lines.slice(1))
    lake.write("accounts", "r2", accounts_table(["b", "c"]))
    accounts = "select count(*) as n from accounts"
    count = "select record_id, count(*) as n from transactions group by 1 order by 1"

    published(lake.root, target)
    assert query(target, count).values.tolist() == [["r1", 1], ["r2", 2]]
    assert query(target, accounts)["n"][0] == 3

    build(lake.root, target, as_of=between)  # every table as it stood then
    assert query(target, count).values.tolist() == [["r1", 3]]
    assert query(target, accounts)["n"][0] == 1
    days = query(target, "select date::varchar as d from daily_balances order by d")
    assert days["d"].tolist() == ["2024-03-01", "2024-03-02"]  # from all three lines

    build(lake.root, target, as_of=nothing_yet)  # before any table: every view, empty
    assert set(every_view(target)) == set(VIEWS)
    assert all(rows == [] for rows in every_views_rows(target).values())

    build(lake.root, target, as_of={"transactions": first})  # one table pinned, others latest
    assert query(target, count).values.tolist() == [["r1", 3]]
    assert query(target, accounts)["n"][0] == 3
    build(lake.root, target, as_of={"transactions": last - 1})
    assert query(target, count).values.tolist() == [["r1", 1]]


@pytest.mark.parametrize("as_of, message", [
    ({"transactionz": 1}, "no lake table transactionz; the tables: accounts, "),
    ({"transactions": 99}, r"lake table transactions has no version 99 \(latest: 2"),
    ({"payments": 0}, "lake table payments does not exist, so has no version 0"),
])
def test_as_of_a_table_or_version_the_lake_lacks_is_refused(tmp_path, as_of, message):
    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("transactions", "r1", lagos_lines())
    lake.write("transactions", "r1", lagos_lines().slice(1))
    target = tmp_path / "w.duckdb"
    published(lake.root, target)
    before = target.read_bytes()
    with pytest.raises(ValueError, match=message):
        build(lake.root, target, as_of=as_of)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_lake_from_before_a_column_still_builds_every_view(tmp_path):
    """Identity written without the columns added since (a table that lacks some): the views
    build, the columns it lacks are null."""
    from assets.identity import RAW, to_table

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("identity", "r1", to_table([{"customer": "c1", "bvn": "22012345678",
                                            "fullname": "Ada Obi"}]), schema=RAW)
    published(lake.root, tmp_path / "w.duckdb")
    rows = query(tmp_path / "w.duckdb", "select customer_id, fullname, bvn_hash, birth_year "
                                        "from identity")
    assert rows.to_dict("records") == [{"customer_id": "c1", "fullname": "Ada Obi",
                                        "bvn_hash": None, "birth_year": None}]


def test_files_of_one_schema_are_read_by_position_others_by_name(tmp_path):
    """A table whose files share one schema is read without union_by_name (by name, DuckDB
    reads every footer before each query); one whose schema grew keeps it, its older files
    read with the new column null (the test above)."""
    from deltalake import write_deltalake

    from assets.warehouse import lake_sources
    from resources.tables import schema

    def declared(ids: list[str]) -> pa.Table:  # every declared column, those not given null
        given = accounts_table(ids)
        return pa.table({f.name: given[f.name] if f.name in given.column_names else
                         pa.nulls(len(ids), f.type) for f in schema("accounts")
                         if f.name != "record_id"})

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "r1", declared(["a"]), schema("accounts"))
    lake.write("accounts", "r2", declared(["b", "c"]), schema("accounts"))
    grown = Lake(root=str(tmp_path / "grown"))
    uri = grown.table_uri("accounts")
    old = declared(["a"]).drop_columns(["nuban"])  # every declared column but one
    write_deltalake(uri, old.append_column("record_id", pa.array(["r1"])))
    new = declared(["b"])
    write_deltalake(uri, new.append_column("record_id", pa.array(["r2"])),
                    mode="append", schema_mode="merge")

    alike = lake_sources(lake, ["accounts"])["accounts"]
    grew = lake_sources(grown, ["accounts"])["accounts"]
    assert "union_by_name" not in alike and alike.count(".parquet'") == 2
    assert "union_by_name = true" in grew and "union all by name" not in grew  # the files'
    for root in (lake.root, grown.root):
        published(root, tmp_path / "w.duckdb")
        got = query(tmp_path / "w.duckdb", "select count(*) as n, count(nuban) as nubans "
                                           "from accounts")
        assert got["n"].tolist() == [3 if root == lake.root else 2]
        assert got["nubans"].tolist() == [3 if root == lake.root else 1]
