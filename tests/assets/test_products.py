"""Each product asset materialized for real sandbox records, compared with what the API says.

The expected values come from the sandbox over raw HTTP (not through our client), so a
client or asset bug cannot hide behind itself.
"""

from __future__ import annotations

import json
import re
import time
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
import pytest

from assets.accounts import accounts
from assets.balances import balances
from assets.identity import identity
from assets.income import income
from assets.transactions import transactions
from resources.client import Client
from resources.client.resource import ConnectionClient
from resources.config import Tuning
from resources.inbox import open_inbox
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from resources.privacy import Keys, reveal
from tests.bad_service import BadPages
from tests.conftest import connected, land, noted
from tests.ground_truth import partitions
from tests.resources.test_privacy import found

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


def inbox_of(lake_root) -> Path:
    """The inbox beside a test's lake."""
    return Path(f"{lake_root}-inbox.sqlite3")


def resources(box, lake_root, records: list[str]) -> dict:
    """The client of `box`, the lake, an inbox that knows `records`, the default settings."""
    return {"client": ConnectionClient(base_url=box.url, secret_key=box.sandbox_key,
                                       environment="sandbox"),
            "lake": Lake(root=str(lake_root)),
            "inbox": InboxResource(path=connected(inbox_of(lake_root), records)),
            "tuning": Tuning()}


def bad_resources(bad: BadPages, lake_root, records: list[str]) -> dict:
    """As `resources`, the client calling a service that serves invalid transactions."""
    return {"client": ConnectionClient(base_url=bad.url, secret_key="sk_test_x",
                                       environment="sandbox"),
            "lake": Lake(root=str(lake_root)),
            "inbox": InboxResource(path=connected(inbox_of(lake_root), records)),
            "tuning": Tuning()}


def run(assets, records: list[str], res: dict, instance=None, tags=None):
    """One run over the batch `records`, as the sensor starts it."""
    return land(assets, records, res, instance=instance, tags=tags, raise_on_error=False)


def states(lake_root, records: list[str], product: str) -> dict:
    """Each record's landing state of `product`, as the inbox keeps it."""
    with open_inbox(inbox_of(lake_root)) as inbox:
        return {s.record: s for s in inbox.landings(records, product=product)}


def materialization(result, asset: str) -> dg.AssetMaterialization:
    (mat,) = [e.materialization for e in result.get_asset_materialization_events()
              if e.materialization.asset_key == dg.AssetKey(asset)]
    return mat


def failure_text(result) -> str:
    return "\n".join(str(e.event_specific_data.error) for e in result.all_events
                     if e.event_type_value == "STEP_FAILURE")


@pytest.fixture(scope="module")
def landed(shared_sandbox, tmp_path_factory):
    """One record with three accounts, every product materialized once."""
    made = create(shared_sandbox, accounts=3, months=4)
    lake = tmp_path_factory.mktemp("lake")
    time.sleep(0.5)  # the connection completes on its own, right after creation
    result = run(PRODUCTS, [made["record"]], resources(shared_sandbox, lake, [made["record"]]))
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
    keys, masked = Keys.from_env(), 0
    for row in table.slice(0, 500).to_pylist():
        src = by_id[row["transaction_id"]]
        desc = src["notes"]["desc"]  # a phone, a bill or card number: 7 digits or more
        assert row["narration"] == re.sub(r"\d{3,}(\d{4})", r"***\1", desc)
        if row["narration"] != desc:  # the raw one sealed, to its customer
            masked += 1
            assert keys.open(row["narration_sealed"], row["customer_id"]) == {"narration": desc}
        else:
            assert row["narration_sealed"] is None
        signed = (src["credit"] or 0) - (src["debit"] or 0)
        assert row["amount"] == signed  # exact: Decimal on both sides
        assert row["balance"] == src["balance"]
        assert (row["amount"] > 0) == (src["credit"] is not None)
    assert set(table["record_id"].to_pylist()) == {made["record"]}  # its rows, only its
    assert masked > 10
    long_runs = {d for t in wire for d in re.findall(r"\d{7,}", t["notes"]["desc"])}
    assert len(long_runs) > 10 and found(Path(lake) / "transactions", long_runs) == {}


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
    record = made["record"]
    with shared_sandbox.api() as api:
        inc = api.post("income/get", json={"record": record}).json()["data"]["income"]
        ident = api.post("identity/get", json={"record": record}).json()["data"]
    summary = read(lake, "income", record)
    assert summary["number_of_transactions"].to_pylist() == [inc["number_of_transactions"]]
    streams = read(lake, "income_streams", record)
    assert sorted(streams["stream_id"].to_pylist()) == sorted(s["stream_id"]
                                                               for s in inc["streams"])
    people = read(lake, "identity", record)
    bvns = [i["bvn"] for i in ident["identity"]]
    assert people["bvn"].to_pylist() == ["*******" + b[-4:] for b in bvns]
    keys = Keys.from_env()
    assert people["bvn_hash"].to_pylist() == [keys.hash(b) for b in bvns]
    opened = reveal(people, keys)
    assert [o["bvn"] for o in opened] == bvns
    assert [o["emails"] for o in opened] == [i["email"] for i in ident["identity"]]
    # what Dagster, the lake's landings and the inbox hear of identity: counts, never a
    # number or a contact
    raw = [v for i in ident["identity"] for v in (i["bvn"], *i["phone"], *i["email"])]
    told = [str(materialization(result, "identity").metadata),
            str(noted(lake, "landings", result.run_id)),
            str(states(lake, [record], "identity"))]
    assert [v for v in raw if any(v in t for t in told)] == []
    assert materialization(result, "identity").metadata["published"].value == 1
    # one verdict per check and run in Dagster, the record's own in the lake and the inbox;
    # a run lands transactions before income, so income's check is judged in its step
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert not materialization(result, "income").metadata.get("checked_when_transactions_land")
    assert checks == {"account_has_record": True, "running_balance_reconciles": True,
                      "income_matches_transactions": True}
    assert [(r["record_id"], r["product"], r["check_name"], r["passed"], r["problem_count"])
            for r in noted(lake, "checks", result.run_id)] == [
        (record, "accounts", "account_has_record", True, 0),
        (record, "income", "income_matches_transactions", True, 0),
        (record, "transactions", "running_balance_reconciles", True, 0)]
    for product, check in (("accounts", "account_has_record"),
                           ("transactions", "running_balance_reconciles"),
                           ("income", "income_matches_transactions")):
        state = states(lake, [record], product)[record]
        assert (state.outcome, state.run_id) == ("landed", result.run_id)
        assert state.detail["checks"] == {check: 0}


def test_each_product_notes_the_record_it_landed(landed):
    """A row per product in the lake's `landings`, its latest state in the inbox: landed by
    this run, with the rows it published where the lake holds them."""
    made, lake, result = landed
    record = made["record"]
    rows = noted(lake, "landings", result.run_id)
    assert [(r["record_id"], r["product"], r["outcome"], r["error"]) for r in rows] == [
        (record, p, "landed", None)
        for p in ("accounts", "balances", "identity", "income", "transactions")]
    tables = {"accounts": "accounts", "balances": "balance_history", "identity": "identity",
              "income": "income", "transactions": "transactions"}
    for r in rows:
        table = tables[r["product"]]
        # the version its commit made holds its rows (a later run may have added more)
        at = Lake(root=str(lake)).read(table, record, version=r["lake_version"])
        assert r["row_count"] == at.num_rows > 0
        assert r["lake_table"] == str(lake / table)
        state = states(lake, [record], r["product"])[record]
        assert (state.outcome, state.row_count, state.detail["lake_version"]) == (
            "landed", r["row_count"], r["lake_version"])
        # and the batch's materialization says the same, for a batch of one
        meta = materialization(result, r["product"]).metadata
        assert (meta["records"].value, meta["published"].value, meta["held"].value,
                meta["failed"].value) == (1, 1, 0, 0)
        assert meta["rows_landed"].value == r["row_count"]  # the batch's rows
        # the asset's size: its table's rows as the commit left them, every record's
        assert meta["dagster/row_count"].value == Lake(root=str(lake)).read(
            table, version=r["lake_version"]).num_rows >= r["row_count"]
        assert meta["lake_version"].value == r["lake_version"]
        assert result.run_id in meta["each_record"].value


def test_rerun_doubles_nothing(shared_sandbox, landed):
    made, lake, _ = landed
    res = resources(shared_sandbox, lake, [made["record"]])
    before = read(lake, "transactions", made["record"])
    time.sleep(1.1)  # snapshots are kept per second: make the second one a new one
    again = run([balances, transactions], [made["record"]], res)
    assert again.success, failure_text(again)
    after = read(lake, "transactions", made["record"])
    assert after.num_rows == before.num_rows
    assert pc.count_distinct(after["transaction_id"]).as_py() == after.num_rows
    assert after["transaction_id"].to_pylist() == before["transaction_id"].to_pylist()
    history = read(lake, "balance_history", made["record"])
    assert history.num_rows == 2 * len(made["accounts"])  # one more snapshot per account
    assert [(r["product"], r["outcome"]) for r in noted(lake, "landings", again.run_id)] == [
        ("balances", "landed"), ("transactions", "landed")]


def test_many_records_in_one_run(shared_sandbox, tmp_path):
    """One run carries a batch of records: each lands on its own, Dagster hears of the
    batch once."""
    made = [create(shared_sandbox, accounts=1, months=2) for _ in range(3)]
    keys = [m["record"] for m in made]
    time.sleep(0.5)
    out = run([accounts], keys, resources(shared_sandbox, tmp_path, keys))
    assert out.success, failure_text(out)
    for m in made:
        table = read(tmp_path, "accounts", m["record"])
        assert table["account_id"].to_pylist() == m["accounts"]
    (mat,) = out.asset_materializations_for_node("accounts")
    assert (mat.metadata["records"].value, mat.metadata["published"].value) == (3, 3)
    assert mat.metadata["dagster/row_count"].value == mat.metadata["rows_landed"].value == 3
    (check,) = out.get_asset_check_evaluations()
    assert check.passed and check.metadata["records_checked"].value == 3
    assert [(r["record_id"], r["outcome"]) for r in noted(tmp_path, "landings", out.run_id)] \
        == [(k, "landed") for k in sorted(keys)]
    assert {r: s.outcome for r, s in states(tmp_path, keys, "accounts").items()} == \
        dict.fromkeys(keys, "landed")


def test_an_account_of_a_record_the_inbox_never_heard_of_is_held(shared_sandbox, tmp_path):
    """The inbox is who knows the records: one it never heard of is held back, and the
    others of its batch land."""
    made = [create(shared_sandbox, accounts=1, months=1) for _ in range(2)]
    known, stranger = made[0]["record"], made[1]["record"]
    time.sleep(0.5)
    out = run([accounts], [known, stranger], resources(shared_sandbox, tmp_path, [known]))
    assert out.success, failure_text(out)  # held back is not failed
    (mat,) = out.asset_materializations_for_node("accounts")
    assert (mat.metadata["published"].value, mat.metadata["held"].value) == (1, 1)
    with open_inbox(inbox_of(tmp_path)) as inbox:  # Dagster hears of records by number
        number = inbox.numbers([stranger])[stranger]
    assert mat.metadata["held_records"].value == [number]
    (check,) = out.get_asset_check_evaluations()
    assert not check.passed and check.metadata["failing_records"].value == [number]
    assert check.metadata["records_failed"].value == 1
    assert read(tmp_path, "accounts", known) is not None
    assert stranger not in partitions(Lake(root=str(tmp_path)), "accounts")
    (bad,) = [r for r in noted(tmp_path, "checks", out.run_id) if not r["passed"]]
    assert bad["record_id"] == stranger and json.loads(bad["problems"])[0]["record"] == stranger
    assert states(tmp_path, [stranger], "accounts")[stranger].outcome == "held"


@pytest.mark.slow
def test_record_with_100k_transactions(frozen_sandbox, tmp_path):
    box = frozen_sandbox
    made = create(box, accounts=1, months=18, volume=200)
    with box.api() as api:
        first = api.post("transactions/get", json={"record": made["record"], "limit": 1})
        total = first.json()["data"]["pagination"]["totalDocs"]
    assert total >= 100_000
    result = run([transactions], [made["record"]], resources(box, tmp_path, [made["record"]]))
    assert result.success, failure_text(result)
    table = read(tmp_path, "transactions", made["record"])
    assert table.num_rows == total
    assert pc.count_distinct(table["transaction_id"]).as_py() == total
    # more than STREAM_ROWS lines: read by page ranges at once, landed piece by piece, every
    # line of the service's once (delta-rs may write a stream's batches in another order)
    with Client(base_url=box.url, secret_key=box.sandbox_key) as client:
        whole = client.transactions(made["record"])
    assert sorted(table["transaction_id"].to_pylist()) == sorted(
        whole["transaction_id"].to_pylist())


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
    record = made["record"]
    res = resources(sandbox, tmp_path, [record])
    time.sleep(0.5)
    first = run([transactions], [record], res)
    assert first.success, failure_text(first)
    before = total_transactions(sandbox, record)
    with sandbox.api() as api:
        moved = api.post("sandbox/clock/advance", json={"seconds": 3 * 86400})
        assert moved.status_code == 200, moved.text
    after_total = total_transactions(sandbox, record)
    assert after_total > before  # three new days of transactions
    second = run([transactions], [record], res)
    assert second.success, failure_text(second)
    meta = second.asset_materializations_for_node("transactions")[0].metadata
    assert meta["pulled_whole"].value == 0
    assert meta["fetched_rows"].value < after_total
    (row,) = noted(tmp_path, "landings", second.run_id)
    assert row["pull"].startswith("window from")  # from the last date seen, less 3 days
    assert row["fetched_rows"] == meta["fetched_rows"].value
    assert states(tmp_path, [record], "transactions")[record].detail["pull"] == row["pull"]
    table = read(tmp_path, "transactions", record)
    assert table.num_rows == after_total == row["row_count"]
    assert pc.count_distinct(table["transaction_id"]).as_py() == after_total
    wire = raw_pages(sandbox, "transactions/get", {"record": record}, "transaction")
    assert sorted(table["transaction_id"].to_pylist()) == sorted(t["_id"] for t in wire)


def test_failed_validation_writes_nothing(tmp_path):
    from assets.transactions import SCHEMA

    lake = Lake(root=str(tmp_path))
    lake.write("transactions", "rec1", SCHEMA.empty_table())
    version, files = lake.version("transactions"), sorted((tmp_path / "transactions").rglob("*"))
    bad = BadPages()
    try:
        result = run([transactions], ["rec1"], bad_resources(bad, tmp_path, ["rec1"]))
    finally:
        bad.close()
    assert not result.success
    text = failure_text(result)
    assert "ValidationFailed" in text and "exactly one of debit and credit" in text
    assert "rows 1" in text and "were not written" in text
    assert "not retried" in text  # bad data: the engine does not try again
    assert not [e for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]
    assert lake.version("transactions") == version  # no commit
    assert sorted((tmp_path / "transactions").rglob("*")) == files  # no file left behind
    (row,) = noted(tmp_path, "landings", result.run_id)
    assert (row["record_id"], row["outcome"], row["lake_version"]) == ("rec1", "failed", None)
    assert "exactly one of debit and credit" in row["error"]
    state = states(tmp_path, ["rec1"], "transactions")["rec1"]
    assert state.outcome == "failed" and state.detail["error"] == row["error"]


def test_a_large_batch_lands_chunk_by_chunk(shared_sandbox, tmp_path, monkeypatch):
    monkeypatch.setattr("assets.transactions.CHUNK", 4)  # ten records: three chunks
    made = [create(shared_sandbox, accounts=1, months=1, volume=5) for _ in range(10)]
    keys = [m["record"] for m in made]
    out = run([transactions], keys, resources(shared_sandbox, tmp_path, keys))
    assert out.success, failure_text(out)
    # landed chunk by chunk, each record noted with its own figures, the batch told once
    rows = {r["record_id"]: r for r in noted(tmp_path, "landings", out.run_id)}
    assert set(rows) == set(keys)
    for key in keys:
        table = read(tmp_path, "transactions", key)
        assert table.num_rows == total_transactions(shared_sandbox, key) > 0
        assert rows[key]["outcome"] == "landed"
        assert rows[key]["row_count"] == table.num_rows
        assert rows[key]["fetched_rows"] == table.num_rows  # a first pull: all of it
        assert rows[key]["lake_table"] == str(tmp_path / "transactions")
    # committed per chunk of records, in the batch's order
    first = rows[keys[0]]["lake_version"]
    assert [rows[k]["lake_version"] - first for k in keys] == [0] * 4 + [1] * 4 + [2] * 2
    (mat,) = out.asset_materializations_for_node("transactions")
    assert (mat.metadata["records"].value, mat.metadata["published"].value) == (10, 10)
    assert mat.metadata["rows_landed"].value == sum(r["row_count"] for r in rows.values())
    assert mat.metadata["fetched_rows"].value == mat.metadata["rows_landed"].value
    # a fresh lake: the table holds this batch's rows and nothing else
    assert mat.metadata["dagster/row_count"].value == mat.metadata["rows_landed"].value
    assert mat.metadata["lake_version"].value == first + 2 == Lake(
        root=str(tmp_path)).version("transactions")
    assert "ledgerlake report '#" in mat.metadata["daily_balance"].value  # more than drawn
    (check,) = out.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("running_balance_reconciles", True)
    assert (check.metadata["records_checked"].value, check.metadata["records_failed"].value) \
        == (10, 0)
    assert {(r["record_id"], r["passed"]) for r in noted(tmp_path, "checks", out.run_id)} == {
        (k, True) for k in keys}


def test_a_failure_in_a_large_batch_fails_the_run_and_writes_nothing(tmp_path):
    keys = [f"rec{i:02d}" for i in range(9)]
    bad = BadPages()
    try:
        out = run([transactions], keys, bad_resources(bad, tmp_path, keys))
    finally:
        bad.close()
    assert not out.success
    text = failure_text(out)
    assert "exactly one of debit and credit" in text and "were not written" in text
    assert "9 record(s) of transactions failed" in text
    assert not list((tmp_path / "transactions").rglob("*.parquet"))
    assert not out.asset_materializations_for_node("transactions")
    rows = noted(tmp_path, "landings", out.run_id)
    assert [(r["record_id"], r["outcome"]) for r in rows] == [(k, "failed") for k in keys]
    assert all("exactly one of debit and credit" in r["error"] for r in rows)
    assert {s.outcome for s in states(tmp_path, keys, "transactions").values()} == {"failed"}


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
        found = re.fullmatch(r"!\[daily balance of record #(\d+)\]\(data:image/png;base64,"
                             r"([A-Za-z0-9+/=]+)\)", text)
        assert found and made["record"] not in text, text[:120]  # named by its number
        png = base64.b64decode(found.group(2))
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        assert (width, height) == (640, 208)
        assert len(png) < 40_000  # stored in every such event: kept small


@pytest.mark.parametrize("product", [identity, transactions], ids=["identity", "transactions"])
def test_without_a_key_the_step_fails_at_once_saying_so(shared_sandbox, tmp_path, monkeypatch,
                                                        product):
    """No personal-data key is a setting to fix, not a fault to retry: the step fails on its
    first try, saying "no key", and lands nothing."""
    made = create(shared_sandbox, accounts=1, months=1)
    monkeypatch.delenv("LEDGERLAKE_PII_KEY", raising=False)
    monkeypatch.setenv("LEDGERLAKE_HOME", str(tmp_path / "home"))  # no key file there
    out = run([product], [made["record"]], resources(shared_sandbox, tmp_path / "lake",
                                                     [made["record"]]))
    assert not out.success and "no key: LEDGERLAKE_PII_KEY is not set" in failure_text(out)
    assert not [e for e in out.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert not (tmp_path / "lake" / product.key.path[-1]).exists()

