"""The source wins, and only audited rows are published: against a real sandbox whose lines
go pending, post under new ids, get reversed or arrive back-dated, as real banks' do.

Ground truth is the sandbox's own (`sandbox/records/ledger`: what a full pull returns now),
never the pipeline's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from assets.income import INCOME_MATCHES, income
from assets.transactions import FULL, RUNNING_BALANCE, reconciles_on, transactions
from resources.client.resource import ConnectionClient
from resources.config import Tuning
from resources.inbox import open_inbox
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from tests.conftest import Sandbox, connected, land, noted

DAY = 86400


control = Sandbox.control
create = Sandbox.customer


@pytest.fixture
def sandbox(frozen_sandbox):
    """Every test here compares the lake with what a full pull returns now, so the sandbox's
    clock stands still between the two: on wall time a line can post between the pipeline's
    pull and the test's reading of the truth (35,795 landed against 35,796 in CI)."""
    return frozen_sandbox


def truth(box, record: str) -> dict:
    """What a full pull of the record returns now, per the sandbox: counts, sums, ids."""
    return control(box, "records/ledger", record=record)


def inbox_of(lake_root) -> Path:
    """The inbox beside a test's lake."""
    return Path(f"{lake_root}-inbox.sqlite3")


def resources(box, lake_root, records: list[str], **client) -> dict:
    """The sandbox's client, the lake, an inbox that knows `records`, the default settings."""
    return {"client": ConnectionClient(base_url=box.url, secret_key=box.sandbox_key,
                                       environment="sandbox", **client),
            "lake": Lake(root=str(lake_root)),
            "inbox": InboxResource(path=connected(inbox_of(lake_root), records)),
            "tuning": Tuning()}


def run(assets, records: list[str], res: dict, **kw):
    """One run over the batch `records`."""
    return land(assets, records, res, raise_on_error=False, **kw)


def state(lake_root, record: str, product: str):
    """The record's landing state of `product`, as the inbox keeps it."""
    with open_inbox(inbox_of(lake_root)) as inbox:
        (out,) = inbox.landings([record], product=product)
    return out


def lake_ids(lake_root, record: str) -> list[str]:
    table = Lake(root=str(lake_root)).read("transactions", record)
    return [] if table is None else table["transaction_id"].to_pylist()


def assert_equals_truth(box, lake_root, record: str) -> None:
    """The lake holds exactly the record's lines a full pull returns now: count, ids, sums."""
    want = truth(box, record)
    table = Lake(root=str(lake_root)).read("transactions", record)
    ids = table["transaction_id"].to_pylist()
    assert len(ids) == len(set(ids)) == sum(a["lines"] for a in want["accounts"])
    per_account = {a["account"]: a for a in want["accounts"]}
    for account, got in per_account.items():
        mine = table.filter(pc.equal(table["account_id"], account))
        mine_ids = sorted(mine["transaction_id"].to_pylist())
        assert hashlib.sha256("\n".join(mine_ids).encode()).hexdigest() == got["ids_sha256"]
        net = pc.sum(mine["amount"]).as_py()
        assert int(net * 100) == got["net_kobo"]  # exact: decimal sums, kobo on both sides


def evaluations(result, check: str) -> list:
    return [e for e in result.get_asset_check_evaluations() if e.check_name == check]


def pending_ids(lake_root, record: str) -> set[str]:
    table = Lake(root=str(lake_root)).read("transactions", record)
    pending = table.filter(pc.is_null(table["cleared_date"]))
    return set(pending["transaction_id"].to_pylist())


def test_lines_gone_at_source_leave_the_lake_and_back_dated_ones_arrive(sandbox, tmp_path):
    """A pending line that posts under a new id or is reversed is gone from the lake after the
    next pull; a line posted back-dated, before the pull's window, reaches it (the chain
    breaks, the record is pulled whole); after both the lake equals the sandbox's truth."""
    # enough accounts and lines that, whatever the day, some of the last two days' pending
    # lines post and some were authorisations that are reversed
    made = create(sandbox, accounts=5, months=2, volume=80, seed=7)
    record = made["record"]
    lake = Lake(root=str(tmp_path))
    res = resources(sandbox, tmp_path, [record])
    first = run([transactions], [record], res)
    assert first.success
    assert_equals_truth(sandbox, tmp_path, record)
    before = lake.read("transactions", record)
    pending = before.filter(pc.is_null(before["cleared_date"]))
    was_pending = set(pending["transaction_id"].to_pylist())
    assert was_pending, "seed 7 shows pending lines: the test needs some"
    last_posted = pc.max(before["cleared_date"]).as_py()
    control(sandbox, "clock/advance", seconds=5 * DAY)  # every one of them resolves
    second = run([transactions], [record], res)
    assert second.success
    after = lake.read("transactions", record)
    assert not was_pending & set(after["transaction_id"].to_pylist())
    # both fates happened: some posted again under a new id (same ref and amount), some were
    # reversed (no line of theirs is left at all)
    posted = set(zip(after["ref"].to_pylist(), after["amount"].to_pylist(), strict=True))
    fates = [(r, a) in posted for r, a in zip(pending["ref"].to_pylist(),
                                             pending["amount"].to_pylist(), strict=True)]
    assert any(fates) and not all(fates), fates
    # lines posted since the first pull with a value date before the second pull's window
    late = after.filter(pc.and_(
        pc.greater(after["cleared_date"], pa.scalar(last_posted, after["cleared_date"].type)),
        pc.less(after["trans_date"], pa.scalar(
            last_posted - dt.timedelta(days=3), after["trans_date"].type))))
    assert late.num_rows > 0, "seed 7 posts a line back-dated in those days"
    (mat,) = second.asset_materializations_for_node("transactions")
    assert mat.metadata["pulled_whole"].value == 1
    (row,) = noted(tmp_path, "landings", second.run_id)
    assert row["pull"].startswith(f"{FULL} (the window pull from")
    assert row["outcome"] == "landed" and row["row_count"] == after.num_rows
    assert state(tmp_path, record, "transactions").detail["pull"] == row["pull"]
    assert_equals_truth(sandbox, tmp_path, record)


def test_the_weekly_reconcile_pulls_the_whole_history(sandbox, tmp_path):
    made = create(sandbox, accounts=1, months=1, volume=10, seed=3)
    record = made["record"]
    day = next(dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(7)
               if reconciles_on(record, dt.date(2026, 11, 1) + dt.timedelta(days=i), 7))
    assert not reconciles_on(record, day + dt.timedelta(days=1), 7)  # once a week, not daily
    res = resources(sandbox, tmp_path, [record])
    assert run([transactions], [record], res).success
    other = run([transactions], [record], res,
                tags={"ledgerlake/refresh_day": (day + dt.timedelta(days=1)).isoformat()})
    full = run([transactions], [record], res,
               tags={"ledgerlake/refresh_day": day.isoformat()})
    pulls = [noted(tmp_path, "landings", r.run_id)[0]["pull"] for r in (other, full)]
    assert pulls[0].startswith("window from") and pulls[1] == FULL
    assert [r.asset_materializations_for_node("transactions")[0].metadata["pulled_whole"].value
            for r in (other, full)] == [0, 1]
    assert_equals_truth(sandbox, tmp_path, record)


def test_a_broken_chain_keeps_the_published_rows_and_names_the_line(sandbox, tmp_path):
    made = create(sandbox, accounts=2, months=2, volume=10, seed=11, settlement=False)
    record = made["record"]
    lake = Lake(root=str(tmp_path))
    res = resources(sandbox, tmp_path, [record])
    first = run([transactions], [record], res)
    assert first.success
    published = lake.read("transactions", record)
    bad = control(sandbox, "records/corrupt", record=record)  # a line mid-history
    control(sandbox, "clock/advance", seconds=DAY)  # new lines: new rows to audit
    # a window pull would not re-read the middle of the history: pull it all
    held = run([transactions], [record], res,
               run_config={"ops": {"transactions": {"config": {"full_history": True}}}})
    assert held.success  # a held-back record is not a failed run: the check says it
    (verdict,) = evaluations(held, "running_balance_reconciles")
    with open_inbox(inbox_of(tmp_path)) as inbox:  # Dagster hears of records by number
        number = inbox.numbers([record])[record]
    assert not verdict.passed and verdict.metadata["failing_records"].value == [number]
    assert (verdict.metadata["records_checked"].value,
            verdict.metadata["records_failed"].value) == (1, 1)
    assert "previous rows stay in view" in verdict.description
    assert not held.asset_materializations_for_node("transactions")  # nothing published
    assert lake.read("transactions", record).equals(published)  # the last good rows
    # the record's verdict, in full in the lake and in brief in its state
    (check,) = noted(tmp_path, "checks", held.run_id)
    assert (check["record_id"], check["check_name"], check["passed"], check["blocking"]) == (
        record, RUNNING_BALANCE.name, False, True)
    problems = json.loads(check["problems"])
    assert problems[0]["transaction_id"] == bad["transaction"]
    assert problems[0]["balance"] == f"{bad['balance_served']:.2f}"
    assert check["problem_count"] >= 1
    (row,) = noted(tmp_path, "landings", held.run_id)
    assert (row["outcome"], row["lake_version"], row["error"]) == ("held", None, None)
    now = state(tmp_path, record, "transactions")
    assert (now.outcome, now.run_id) == ("held", held.run_id)
    assert now.detail["checks"] == {RUNNING_BALANCE.name: check["problem_count"]}
    assert now.detail["problems"][0]["transaction_id"] == bad["transaction"]
    # when its rows were last published stays: the first run's
    (landed,) = noted(tmp_path, "landings", first.run_id)
    assert abs(now.landed_at - landed["landed_at"].timestamp()) < 0.001 < now.at - now.landed_at


def test_an_engine_retry_lands_a_record_whose_fetch_kept_failing(sandbox, tmp_path):
    """The service fails the record's fetch more times than the client retries a request:
    the step fails, the engine retries it (RetryPolicy), and the record lands with no one
    acting."""
    made = create(sandbox, accounts=1, months=1, volume=5, seed=5)
    record = made["record"]
    control(sandbox, "records/fail", record=record, product="transactions", times=3)
    res = resources(sandbox, tmp_path, [record], max_attempts=2, backoff_base_s=0.01)
    result = run([transactions], [record], res)
    assert result.success
    retries = [e for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]
    assert len(retries) >= 1
    # the failed try is noted, then the landing that followed it
    rows = noted(tmp_path, "landings", result.run_id)
    assert [r["outcome"] for r in rows][-1] == "landed" and rows[0]["outcome"] == "failed"
    assert "INTERNAL_SERVER_ERROR" in rows[0]["error"]
    assert state(tmp_path, record, "transactions").outcome == "landed"
    assert_equals_truth(sandbox, tmp_path, record)


def test_a_retry_skips_the_records_its_run_already_landed(sandbox, tmp_path):
    """Of a batch, one record's fetch fails past the client's tries: the others land on the
    first try, and the engine's retry fetches only the one that failed."""
    made = [create(sandbox, accounts=1, months=1, volume=3, seed=90 + i) for i in range(3)]
    keys = [m["record"] for m in made]
    control(sandbox, "records/fail", record=keys[1], product="transactions", times=2)
    res = resources(sandbox, tmp_path, keys, max_attempts=2, backoff_base_s=0.01)
    result = run([transactions], keys, res)
    assert result.success
    assert len([e for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]) == 1
    rows = noted(tmp_path, "landings", result.run_id)
    tries = {k: [r["outcome"] for r in rows if r["record_id"] == k] for k in keys}
    assert tries == {keys[0]: ["landed"], keys[1]: ["failed", "landed"], keys[2]: ["landed"]}
    # Dagster heard of each try that published: the first of two records, then of one
    mats = [m.metadata for m in result.asset_materializations_for_node("transactions")]
    assert [(m["records"].value, m["published"].value, m["failed"].value) for m in mats] == [
        (3, 2, 1), (1, 1, 0)]
    with open_inbox(inbox_of(tmp_path)) as inbox:  # Dagster hears of records by number
        assert mats[0]["failed_records"].value == [inbox.numbers([keys[1]])[keys[1]]]
    for k in keys:
        assert state(tmp_path, k, "transactions").outcome == "landed"
        assert_equals_truth(sandbox, tmp_path, k)


def test_a_record_failing_past_the_last_retry_is_listed_and_rerun(sandbox, tmp_path):
    """Past the last retry the record stays visible: its run failed, `ledgerlake status`
    lists it as failed, and a rerun lands it without a new callback."""
    from assets.batch import Batch
    from pipeline.freshness import freshness_checks
    from pipeline.jobs import ingest_job
    from pipeline.status import rerun, statuses

    made = create(sandbox, accounts=1, months=1, volume=5, seed=6)
    record = made["record"]
    # 2 tries a request, 4 tries of the step (3 retries): 8 failures outlast them all
    control(sandbox, "records/fail", record=record, product="transactions", times=8)
    res = resources(sandbox, tmp_path, [record], max_attempts=2, backoff_base_s=0.01)
    # the job leaves out the freshness checks: they are the definitions' too
    defs = dg.Definitions(assets=[transactions], asset_checks=freshness_checks,
                          jobs=[ingest_job], resources={**res, "batch": Batch.configure_at_launch()})
    with open_inbox(inbox_of(tmp_path)) as inbox:
        number = inbox.numbers([record])[record]  # what a run's batch names it by
    with dg.DagsterInstance.ephemeral() as instance:
        failed = rerun(defs, instance, [number], ["transactions"])
        assert not failed.success
        with open_inbox(inbox_of(tmp_path)) as inbox:
            (row,) = statuses(inbox, [record])
        assert row.products["transactions"] == "failed" and row.needs_action == ["transactions"]
        assert "INTERNAL_SERVER_ERROR" in row.landings["transactions"].detail["error"]
        assert not lake_ids(tmp_path, record)
        assert [r["outcome"] for r in noted(tmp_path, "landings", failed.run_id)] == \
            ["failed"] * 4  # each try of the step
        again = rerun(defs, instance, [number], ["transactions"])  # the sandbox stopped failing
        assert again.success
        with open_inbox(inbox_of(tmp_path)) as inbox:
            (row,) = statuses(inbox, [record])
        assert row.products["transactions"] == "landed" and not row.needs_action
        assert row.landings["transactions"].run_id == again.run_id
    assert_equals_truth(sandbox, tmp_path, record)


def test_income_before_transactions_is_checked_when_they_land(sandbox, tmp_path):
    made = create(sandbox, accounts=1, months=3, volume=5, seed=21)
    record = made["record"]
    res = resources(sandbox, tmp_path, [record])
    early = run([income], [record], res)
    assert early.success  # not failed for want of transactions
    assert not evaluations(early, "income_matches_transactions")
    meta = early.asset_materializations_for_node("income")[0].metadata
    assert meta["checked_when_transactions_land"].value == 1
    assert not noted(tmp_path, "checks", early.run_id)
    assert "checks" not in state(tmp_path, record, "income").detail
    later = run([transactions], [record], res)
    assert later.success
    # the transactions step checks income, and tells the lake, the inbox and Dagster: an
    # evaluation of income's check after its latest materialization, which the UI shows
    told = {e.check_name: e for e in later.get_asset_check_evaluations()}
    assert set(told) == {RUNNING_BALANCE.name, INCOME_MATCHES.name}
    assert told[INCOME_MATCHES.name].asset_key == dg.AssetKey("income")
    assert told[INCOME_MATCHES.name].passed
    assert told[INCOME_MATCHES.name].metadata["records_checked"].value == 1
    verdicts = [(r["record_id"], r["product"], r["check_name"], r["passed"])
                for r in noted(tmp_path, "checks", later.run_id)]
    assert verdicts == [(record, "income", INCOME_MATCHES.name, True),
                        (record, "transactions", RUNNING_BALANCE.name, True)]
    income_state = state(tmp_path, record, "income")
    assert income_state.run_id == early.run_id  # still the landing that published it
    assert income_state.detail["checks"] == {INCOME_MATCHES.name: 0}


def test_transactions_before_income_are_checked_by_the_income_run(sandbox, tmp_path):
    made = create(sandbox, accounts=1, months=3, volume=5, seed=22)
    record = made["record"]
    res = resources(sandbox, tmp_path, [record])
    assert run([transactions], [record], res).success
    later = run([income], [record], res)
    assert later.success
    (verdict,) = evaluations(later, INCOME_MATCHES.name)
    assert verdict.passed and verdict.metadata["records_checked"].value == 1
    meta = later.asset_materializations_for_node("income")[0].metadata
    assert "checked_when_transactions_land" not in meta
    (row,) = noted(tmp_path, "checks", later.run_id)
    assert (row["record_id"], row["check_name"], row["passed"], row["blocking"]) == (
        record, INCOME_MATCHES.name, True, False)
    assert state(tmp_path, record, "income").detail["checks"] == {INCOME_MATCHES.name: 0}


def test_a_record_removed_mid_batch_fails_alone_and_its_batch_lands_income(sandbox, tmp_path):
    made = [create(sandbox, accounts=1, months=2, volume=4, seed=s) for s in (23, 24)]
    kept, removed = (m["record"] for m in made)
    res = resources(sandbox, tmp_path, [kept, removed])
    with sandbox.api() as api:  # the user unlinks it after its callbacks were batched
        api.post("record/remove", json={"record": removed}).raise_for_status()
    out = run([income, transactions], [kept, removed], res)
    assert not out.success  # the removed record's steps fail, saying why
    failed = {e.step_key for e in out.all_events if e.is_step_failure}
    assert failed == {"income", "transactions"}
    # each product still landed the other record: one product's failure skips no other's
    for product in ("transactions", "income"):
        assert state(tmp_path, kept, product).outcome == "landed"
        assert state(tmp_path, removed, product).outcome == "failed"
    # a run lands transactions first, so income's check is judged in income's step
    meta = out.asset_materializations_for_node("income")[0].metadata
    assert "checked_when_transactions_land" not in meta
    (verdict,) = evaluations(out, INCOME_MATCHES.name)
    assert verdict.passed and verdict.metadata["records_checked"].value == 1
    assert state(tmp_path, kept, "income").detail["checks"] == {INCOME_MATCHES.name: 0}


def test_a_batched_run_reports_each_record_on_its_own(sandbox, tmp_path):
    made = [create(sandbox, accounts=1, months=1, volume=v, seed=30 + v) for v in (2, 6, 12)]
    keys = [m["record"] for m in made]
    out = run([transactions], keys, resources(sandbox, tmp_path, keys))
    assert out.success
    rows = {r["record_id"]: r for r in noted(tmp_path, "landings", out.run_id)}
    assert set(rows) == set(keys)
    lake = Lake(root=str(tmp_path))
    counts = {k: rows[k]["row_count"] for k in keys}
    assert counts == {k: lake.read("transactions", k).num_rows for k in keys}
    assert len(set(counts.values())) == 3  # each its own, not the run's total
    for k in keys:
        assert rows[k]["fetched_rows"] == counts[k]
        assert rows[k]["pull"] == FULL
        assert state(tmp_path, k, "transactions").row_count == counts[k]
    # Dagster hears of the batch: its total, once
    (mat,) = out.asset_materializations_for_node("transactions")
    assert mat.metadata["rows_landed"].value == sum(counts.values())
    assert mat.metadata["records"].value == mat.metadata["published"].value == 3
    verdicts = {r["record_id"]: r["passed"] for r in noted(tmp_path, "checks", out.run_id)}
    assert verdicts == dict.fromkeys(keys, True)
    (verdict,) = evaluations(out, "running_balance_reconciles")
    assert verdict.passed and verdict.metadata["records_checked"].value == 3


APPEND_ONE = """
import datetime as dt, sys, time
from assets.balances import HISTORY, snapshot
from resources.lake import Lake
root, record, i, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
items = [{"account": "acct1", "available_balance": i, "ledger_balance": i,
          "currency": "NGN", "last_updated": "2026-01-01T00:00:00.000Z"}]
at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=i)
time.sleep(max(0.0, go - time.time()))  # both commit at the same instant
Lake(root=root).append("balance_history", {record: snapshot(items, at, "schedule")}, HISTORY)
"""


@pytest.mark.slow  # tens of seconds: make test-all
@pytest.mark.parametrize("concurrent", [2])
def test_two_processes_appending_snapshots_both_land(tmp_path, concurrent):
    """Two runs writing the same record's balance snapshots at once both land, every time."""
    import subprocess
    import sys
    import time

    import pyarrow as pa

    for attempt in range(4):
        record = f"rec{attempt}"
        go = time.time() + 3  # past the children's imports
        procs = [subprocess.Popen([sys.executable, "-c", APPEND_ONE, str(tmp_path), record,
                                   str(i), str(go)]) for i in range(concurrent)]
        assert [p.wait(60) for p in procs] == [0] * concurrent
        table = Lake(root=str(tmp_path)).read("balance_history", record)
        assert sorted(int(v) for v in table["ledger_balance"].to_pylist()) == list(
            range(concurrent)), f"try {attempt}: a snapshot was lost"
        assert isinstance(table, pa.Table)


@pytest.mark.slow
def test_a_million_lines_sum_to_the_sandboxs_totals_to_the_kobo(frozen_sandbox, tmp_path):
    """From the API's JSON through the lake to the views, amounts stay exact: over a million
    lines the warehouse's sums are the sandbox's own integer-kobo totals, per account."""
    import duckdb

    from assets.warehouse import publish

    def published(root, target):
        return publish(root, target)[0]

    made = create(frozen_sandbox, accounts=5, months=35, volume=200, seed=77, settlement=False)
    record = made["record"]
    want = truth(frozen_sandbox, record)
    assert sum(a["lines"] for a in want["accounts"]) >= 1_000_000
    assert run([transactions], [record], resources(frozen_sandbox, tmp_path / "lake",
                                                  [record])).success
    target = tmp_path / "w.duckdb"
    published(tmp_path / "lake", target)
    with duckdb.connect(str(target), read_only=True) as con:
        got = dict(con.execute(
            "select account_id, (sum(amount) * 100)::hugeint from transactions group by 1"
        ).fetchall())
        flows = dict(con.execute(
            "select account_id, (sum(inflow) * 100)::hugeint from monthly_cashflow group by 1"
        ).fetchall())
    assert got == {a["account"]: a["net_kobo"] for a in want["accounts"]}
    assert flows == {a["account"]: a["credit_kobo"] for a in want["accounts"]}
