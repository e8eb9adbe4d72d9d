"""Each product asset materialized for real sandbox records, compared with what the API says.

The expected values come from the sandbox over raw HTTP (not through our client), so a
client or asset bug cannot hide behind itself.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import dagster as dg
import pyarrow.compute as pc
import pytest

from assets.accounts import accounts
from assets.balances import balances
from assets.identity import identity
from assets.income import income
from assets.transactions import transactions
from resources.client import ConnectionClient
from resources.lake import Lake
from resources.privacy import Keys, reveal
from tests.bad_service import BadPages

PRODUCTS = [accounts, balances, transactions, income, identity]


def create(box, **spec) -> dict:
    with box.api() as api:
        made = api.post("sandbox/customers/create", json={"customers": [spec]})
        assert made.status_code == 200, made.text
        return made.json()["data"]["customers"][0]


def raw_pages(box, path: str, body: dict, key: str) -> list[dict]:
    """Every item of a paged endpoint, straight off the wire."""
    items, page = [], 1
    with box.api() as api:
        while page:
            resp = api.post(path, json={**body, "page": page, "limit": 100})
            assert resp.status_code == 200, resp.text
            data = json.loads(resp.content, parse_float=Decimal)["data"]  # money exactly
            items += data[key]
            page = data["pagination"]["nextPage"]
    return items


def resources(box, lake_root) -> dict:
    return {"client": ConnectionClient(base_url=box.url, secret_key=box.sandbox_key,
                                       environment="sandbox"),
            "lake": Lake(root=str(lake_root))}


def run(assets, record: str, res: dict, instance=None, tags=None):
    own = instance is None
    instance = instance or dg.DagsterInstance.ephemeral()
    try:
        instance.add_dynamic_partitions("records", [record])
        return dg.materialize(assets, partition_key=record, resources=res, instance=instance,
                              tags=tags, raise_on_error=False)
    finally:
        if own:
            instance.dispose()


def failure_text(result) -> str:
    return "\n".join(str(e.event_specific_data.error) for e in result.all_events
                     if e.event_type_value == "STEP_FAILURE")


@pytest.fixture(scope="module")
def landed(shared_sandbox, tmp_path_factory):
    """One record with three accounts, every product materialized once."""
    made = create(shared_sandbox, accounts=3, months=4)
    lake = tmp_path_factory.mktemp("lake")
    time.sleep(0.5)  # the connection completes on its own, right after creation
    result = run(PRODUCTS, made["record"], resources(shared_sandbox, lake))
    assert result.success, failure_text(result)
    return made, lake, result


def read(lake, table: str, record: str):
    return Lake(root=str(lake)).read(table, record)


def test_accounts_match_the_api(shared_sandbox, landed):
    made, lake, _ = landed
    table = read(lake, "accounts", made["record"])
    wire = raw_pages(shared_sandbox, "accounts/get", {"record": made["record"]}, "accounts")
    assert sorted(table["account_id"].to_pylist()) == sorted(made["accounts"])
    assert sorted(table["nuban"].to_pylist()) == sorted(a["nuban"] for a in wire)


def test_transactions_match_the_api(shared_sandbox, landed):
    made, lake, _ = landed
    table = read(lake, "transactions", made["record"])
    wire = raw_pages(shared_sandbox, "transactions/get", {"record": made["record"]},
                     "transaction")
    assert table.num_rows == len(wire) > 0
    assert table["transaction_id"].to_pylist() == [t["_id"] for t in wire]
    by_id = {t["_id"]: t for t in wire}
    for row in table.slice(0, 500).to_pylist():
        src = by_id[row["transaction_id"]]
        assert row["narration"] == src["notes"]["desc"]
        signed = (src["credit"] or 0) - (src["debit"] or 0)
        assert row["amount"] == signed  # exact: Decimal on both sides
        assert row["balance"] == src["balance"]
        assert (row["amount"] > 0) == (src["credit"] is not None)
    assert set(table["record_id"].to_pylist()) == {made["record"]}  # its rows, only its


def test_balances_snapshot_and_periodic(shared_sandbox, landed):
    made, lake, _ = landed
    history = read(lake, "balance_history", made["record"])
    wire = raw_pages(shared_sandbox, "balance/get", {"record": made["record"]}, "balance")
    assert sorted(history["account_id"].to_pylist()) == sorted(b["account"] for b in wire)
    assert set(history["source"].to_pylist()) == {"manual"}
    ledger = dict(zip(history["account_id"].to_pylist(), history["ledger_balance"].to_pylist(),
                      strict=True))
    assert ledger == {b["account"]: b["ledger_balance"] for b in wire}
    periodic = read(lake, "balance_periodic", made["record"])
    expected_days = sum(len(b["periodic"]["available_balance"]) for b in wire)
    assert periodic.num_rows == expected_days > 0


def test_income_and_identity(shared_sandbox, landed):
    made, lake, result = landed
    with shared_sandbox.api() as api:
        inc = api.post("income/get", json={"record": made["record"]}).json()["data"]["income"]
        ident = api.post("identity/get", json={"record": made["record"]}).json()["data"]
    summary = read(lake, "income", made["record"])
    assert summary["number_of_transactions"].to_pylist() == [inc["number_of_transactions"]]
    streams = read(lake, "income_streams", made["record"])
    assert sorted(streams["stream_id"].to_pylist()) == sorted(s["stream_id"]
                                                               for s in inc["streams"])
    people = read(lake, "identity", made["record"])
    bvns = [i["bvn"] for i in ident["identity"]]
    assert people["bvn"].to_pylist() == ["*******" + b[-4:] for b in bvns]
    keys = Keys.from_env()
    assert people["bvn_hash"].to_pylist() == [keys.hash(b) for b in bvns]
    opened = reveal(people, keys)
    # the run's preview in the UI shows the masked forms, never the numbers or the contacts
    (mat,) = [m for m in result.get_asset_materialization_events()
              if m.asset_key == dg.AssetKey("identity")]
    preview = mat.materialization.metadata["preview"].value
    assert "*******" + bvns[0][-4:] in preview and "sealed" not in preview
    raw = [v for i in ident["identity"] for v in (i["bvn"], *i["phone"], *i["email"])]
    assert [v for v in raw if v in preview] == []
    assert [o["bvn"] for o in opened] == bvns
    assert [o["emails"] for o in opened] == [i["email"] for i in ident["identity"]]
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"account_has_record": True, "running_balance_reconciles": True,
                      "income_matches_transactions": True}


def test_rerun_doubles_nothing(shared_sandbox, landed):
    made, lake, _ = landed
    res = resources(shared_sandbox, lake)
    before = read(lake, "transactions", made["record"])
    time.sleep(1.1)  # snapshots are kept per second: make the second one a new one
    again = run([balances, transactions], made["record"], res)
    assert again.success, failure_text(again)
    after = read(lake, "transactions", made["record"])
    assert after.num_rows == before.num_rows
    assert pc.count_distinct(after["transaction_id"]).as_py() == after.num_rows
    assert after["transaction_id"].to_pylist() == before["transaction_id"].to_pylist()
    history = read(lake, "balance_history", made["record"])
    assert history.num_rows == 2 * len(made["accounts"])  # one more snapshot per account


def test_many_records_in_one_run(shared_sandbox, tmp_path):
    """The backfill policy lets one run carry several records."""
    made = [create(shared_sandbox, accounts=1, months=2) for _ in range(3)]
    keys = [m["record"] for m in made]
    time.sleep(0.5)
    defs = dg.Definitions(assets=[accounts], resources=resources(shared_sandbox, tmp_path),
                          jobs=[dg.define_asset_job("acc", selection=["accounts"])])
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("records", keys)
        out = defs.resolve_job_def("acc").execute_in_process(
            instance=instance, tags={"dagster/asset_partition_range_start": keys[0],
                                     "dagster/asset_partition_range_end": keys[-1]})
        assert out.success
    for m in made:
        table = read(tmp_path, "accounts", m["record"])
        assert table["account_id"].to_pylist() == m["accounts"]


@pytest.mark.slow
def test_record_with_100k_transactions(frozen_sandbox, tmp_path):
    box = frozen_sandbox
    made = create(box, accounts=1, months=18, volume=200)
    with box.api() as api:
        first = api.post("transactions/get", json={"record": made["record"], "limit": 1})
        total = first.json()["data"]["pagination"]["totalDocs"]
    assert total >= 100_000
    result = run([transactions], made["record"], resources(box, tmp_path))
    assert result.success, failure_text(result)
    table = read(tmp_path, "transactions", made["record"])
    assert table.num_rows == total
    assert pc.count_distinct(table["transaction_id"]).as_py() == total
    # fetched as page ranges at once (SPLIT_ROWS), joined in the service's order
    with ConnectionClient(base_url=box.url, secret_key=box.sandbox_key) as client:
        whole = client.transactions(made["record"])
    assert table["transaction_id"].to_pylist() == whole["transaction_id"].to_pylist()


def test_dedupe_keeps_the_last_copy_in_order():
    import pyarrow as pa

    from assets.transactions import dedupe

    t = pa.table({"transaction_id": ["a", "b", "a", "c", "b"], "v": [1, 2, 3, 4, 5]})
    out = dedupe(t)
    assert out["transaction_id"].to_pylist() == ["a", "c", "b"]
    assert out["v"].to_pylist() == [3, 4, 5]


def total_transactions(box, record: str) -> int:
    with box.api() as api:
        resp = api.post("transactions/get", json={"record": record, "limit": 1})
        return resp.json()["data"]["pagination"]["totalDocs"]


def test_incremental_pull_after_new_days(frozen_sandbox, tmp_path):
    """After the sandbox clock moves, only the tail is fetched and merged without doubles.
    The clock stands still but for the jump: a line posted between the run and the reading
    of the truth below made the two differ by one."""
    sandbox = frozen_sandbox
    made = create(sandbox, accounts=2, months=2, volume=20)
    res = resources(sandbox, tmp_path)
    time.sleep(0.5)
    with dg.DagsterInstance.ephemeral() as instance:
        first = run([transactions], made["record"], res, instance)
        assert first.success, failure_text(first)
        before = total_transactions(sandbox, made["record"])
        with sandbox.api() as api:
            moved = api.post("sandbox/clock/advance", json={"seconds": 3 * 86400})
            assert moved.status_code == 200, moved.text
        after_total = total_transactions(sandbox, made["record"])
        assert after_total > before  # three new days of transactions
        second = run([transactions], made["record"], res, instance)
        assert second.success, failure_text(second)
    meta = second.asset_materializations_for_node("transactions")[0].metadata
    pulled = meta["pull"].value
    assert pulled.startswith("window from")  # from the last date seen, less 3 days
    assert meta["fetched_rows"].value < after_total
    table = read(tmp_path, "transactions", made["record"])
    assert table.num_rows == after_total
    assert pc.count_distinct(table["transaction_id"]).as_py() == after_total
    wire = raw_pages(sandbox, "transactions/get", {"record": made["record"]}, "transaction")
    assert sorted(table["transaction_id"].to_pylist()) == sorted(t["_id"] for t in wire)


def test_failed_validation_writes_nothing(tmp_path):
    from assets.transactions import SCHEMA

    lake = Lake(root=str(tmp_path))
    lake.write("transactions", "rec1", SCHEMA.empty_table())
    version, files = lake.version("transactions"), sorted((tmp_path / "transactions").rglob("*"))
    bad = BadPages()
    try:
        res = {"client": ConnectionClient(base_url=bad.url, secret_key="sk_test_x",
                                          environment="sandbox"),
               "lake": lake}
        result = run([transactions], "rec1", res)
    finally:
        bad.close()
    assert not result.success
    text = failure_text(result)
    assert "ValidationFailed" in text and "exactly one of debit and credit" in text
    assert "rows 1" in text and "nothing was written" in text
    assert lake.version("transactions") == version  # no commit
    assert sorted((tmp_path / "transactions").rglob("*")) == files  # no file left behind


def run_range(assets, keys: list[str], res: dict):
    """One run over a range of records, as a backfill makes it."""
    defs = dg.Definitions(assets=assets, resources=res,
                          jobs=[dg.define_asset_job("batch", selection=assets)])
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("records", keys)
        return defs.resolve_job_def("batch").execute_in_process(
            instance=instance, raise_on_error=False,
            tags={"dagster/asset_partition_range_start": keys[0],
                  "dagster/asset_partition_range_end": keys[-1]})


def test_a_large_batch_lands_chunk_by_chunk(shared_sandbox, tmp_path, monkeypatch):
    monkeypatch.setattr("assets.transactions.CHUNK", 4)  # ten records: three chunks
    made = [create(shared_sandbox, accounts=1, months=1, volume=5) for _ in range(10)]
    keys = [m["record"] for m in made]
    out = run_range([transactions], keys, resources(shared_sandbox, tmp_path))
    assert out.success, failure_text(out)
    # landed chunk by chunk, reported by the run: each record with its own figures
    mats = {m.partition: m.metadata for m in out.asset_materializations_for_node("transactions")}
    assert set(mats) == set(keys)
    for key in keys:
        table = read(tmp_path, "transactions", key)
        assert table.num_rows == total_transactions(shared_sandbox, key) > 0
        assert mats[key]["dagster/row_count"].value == table.num_rows
        assert mats[key]["fetched_rows"].value == table.num_rows  # a first pull: all of it
        first_id = table["transaction_id"][0].as_py()
        assert first_id in mats[key]["preview"].value  # this record's rows, not another's
        assert mats[key]["lake_table"].value == str(tmp_path / "transactions")
        assert mats[key]["lake_version"].value >= 1  # committed per chunk of records
    verdicts = {(c.partition, c.check_name): c.passed for c in out.get_asset_check_evaluations()}
    assert verdicts == {(k, "running_balance_reconciles"): True for k in keys}


def test_a_failure_in_a_large_batch_fails_the_run_and_writes_nothing(tmp_path):
    keys = [f"rec{i:02d}" for i in range(9)]
    bad = BadPages()
    try:
        res = {"client": ConnectionClient(base_url=bad.url, secret_key="sk_test_x",
                                          environment="sandbox"),
               "lake": Lake(root=str(tmp_path))}
        out = run_range([transactions], keys, res)
    finally:
        bad.close()
    assert not out.success
    text = failure_text(out)
    assert "exactly one of debit and credit" in text and "nothing was written" in text
    assert not list(tmp_path.rglob("*.parquet"))


def test_balances_and_transactions_show_the_daily_balance_chart(landed):
    """A small run's materializations carry the record's daily balance as a PNG in Markdown
    (assets/charts.py), the image the Dagster UI shows inline."""
    import base64
    import re

    made, _, result = landed
    for asset in ("balances", "transactions"):
        [mat] = [e.materialization for e in result.get_asset_materialization_events()
                 if e.materialization.asset_key == dg.AssetKey(asset)]
        text = mat.metadata["daily_balance"].value
        found = re.fullmatch(r"!\[daily balance of record (\w+)\]\(data:image/png;base64,"
                             r"([A-Za-z0-9+/=]+)\)", text)
        assert found and found.group(1) == made["record"], text[:120]
        png = base64.b64decode(found.group(2))
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        assert (width, height) == (640, 208)
        assert len(png) < 40_000  # stored in every such event: kept small
