"""The source wins, and only audited rows are published: against a real sandbox whose lines
go pending, post under new ids, get reversed or arrive back-dated, as real banks' do.

Ground truth is the sandbox's own (`sandbox/records/ledger`: what a full pull returns now),
never the pipeline's.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from assets.income import income
from assets.transactions import FULL, reconciles_on, transactions
from resources.client import ConnectionClient
from resources.lake import Lake
from tests.conftest import Sandbox

DAY = 86400


control = Sandbox.control
create = Sandbox.customer


def truth(box, record: str) -> dict:
    """What a full pull of the record returns now, per the sandbox: counts, sums, ids."""
    return control(box, "records/ledger", record=record)


def resources(box, lake_root, **client) -> dict:
    return {"client": ConnectionClient(base_url=box.url, secret_key=box.sandbox_key,
                                       environment="sandbox", **client),
            "lake": Lake(root=str(lake_root))}


def land(assets, record: str, res: dict, instance: dg.DagsterInstance, **kw):
    if not instance.has_dynamic_partition("records", record):
        instance.add_dynamic_partitions("records", [record])
    return dg.materialize(assets, partition_key=record, resources=res, instance=instance,
                          raise_on_error=False, **kw)


def lake_ids(lake_root, record: str) -> list[str]:
    table = Lake(root=str(lake_root)).read("transactions", record)
    return [] if table is None else table["transaction_id"].to_pylist()


def assert_equals_truth(box, lake_root, record: str) -> None:
    """The partition holds exactly the lines a full pull returns now: count, ids, sums."""
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
    with dg.DagsterInstance.ephemeral() as instance:
        first = land([transactions], record, resources(sandbox, tmp_path), instance)
        assert first.success
        assert_equals_truth(sandbox, tmp_path, record)
        before = lake.read("transactions", record)
        pending = before.filter(pc.is_null(before["cleared_date"]))
        was_pending = set(pending["transaction_id"].to_pylist())
        assert was_pending, "seed 7 shows pending lines: the test needs some"
        last_posted = pc.max(before["cleared_date"]).as_py()
        control(sandbox, "clock/advance", seconds=5 * DAY)  # every one of them resolves
        second = land([transactions], record, resources(sandbox, tmp_path), instance)
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
    assert mat.metadata["pull"].value.startswith(f"{FULL} (the window pull from")
    assert_equals_truth(sandbox, tmp_path, record)


def test_the_weekly_reconcile_pulls_the_whole_history(sandbox, tmp_path):
    made = create(sandbox, accounts=1, months=1, volume=10, seed=3)
    record = made["record"]
    day = next(dt.date(2026, 11, 1) + dt.timedelta(days=i) for i in range(7)
               if reconciles_on(record, dt.date(2026, 11, 1) + dt.timedelta(days=i), 7))
    assert not reconciles_on(record, day + dt.timedelta(days=1), 7)  # once a week, not daily
    with dg.DagsterInstance.ephemeral() as instance:
        assert land([transactions], record, resources(sandbox, tmp_path), instance).success
        other = land([transactions], record, resources(sandbox, tmp_path), instance,
                     tags={"ledgerlake/refresh_day": (day + dt.timedelta(days=1)).isoformat()})
        full = land([transactions], record, resources(sandbox, tmp_path), instance,
                    tags={"ledgerlake/refresh_day": day.isoformat()})
    pulls = [r.asset_materializations_for_node("transactions")[0].metadata["pull"].value
             for r in (other, full)]
    assert pulls[0].startswith("window from") and pulls[1] == FULL
    assert_equals_truth(sandbox, tmp_path, record)


def test_a_broken_chain_keeps_the_published_rows_and_names_the_line(sandbox, tmp_path):
    made = create(sandbox, accounts=2, months=2, volume=10, seed=11, settlement=False)
    record = made["record"]
    lake = Lake(root=str(tmp_path))
    with dg.DagsterInstance.ephemeral() as instance:
        assert land([transactions], record, resources(sandbox, tmp_path), instance).success
        published = lake.read("transactions", record)
        bad = control(sandbox, "records/corrupt", record=record)  # a line mid-history
        control(sandbox, "clock/advance", seconds=DAY)  # new lines: a new partition to audit
        # a window pull would not re-read the middle of the history: pull it all
        held = land([transactions], record, resources(sandbox, tmp_path), instance,
                    run_config={"ops": {"transactions": {"config": {"full_history": True}}}})
        assert held.success  # a held-back record is not a failed run: the check says it
        (verdict,) = evaluations(held, "running_balance_reconciles")
        assert not verdict.passed and verdict.partition == record
        problems = verdict.metadata["problems"].value
        assert problems[0]["transaction_id"] == bad["transaction"]
        assert problems[0]["balance"] == f"{bad['balance_served']:.2f}"
        assert "not published" in verdict.description
        assert not held.asset_materializations_for_node("transactions")  # nothing published
        assert lake.read("transactions", record).equals(published)  # the last good rows


def test_an_engine_retry_lands_a_record_whose_fetch_kept_failing(sandbox, tmp_path):
    """The service fails the record's fetch more times than the client retries a request:
    the step fails, the engine retries it (RetryPolicy), and the record lands with no one
    acting."""
    made = create(sandbox, accounts=1, months=1, volume=5, seed=5)
    record = made["record"]
    control(sandbox, "records/fail", record=record, product="transactions", times=3)
    res = resources(sandbox, tmp_path, max_attempts=2, backoff_base_s=0.01)
    with dg.DagsterInstance.ephemeral() as instance:
        result = land([transactions], record, res, instance)
        assert result.success
        retries = [e for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]
        assert len(retries) >= 1
    assert_equals_truth(sandbox, tmp_path, record)


def test_a_record_failing_past_the_last_retry_is_listed_and_rerun(sandbox, tmp_path):
    """Past the last retry the record stays visible: its run failed, `ledgerlake status`
    lists it as failed, and a rerun lands it without a new callback."""
    from pipeline.jobs import ingest_job
    from pipeline.status import rerun, statuses

    made = create(sandbox, accounts=1, months=1, volume=5, seed=6)
    record = made["record"]
    # 2 tries a request, 4 tries of the step (3 retries): 8 failures outlast them all
    control(sandbox, "records/fail", record=record, product="transactions", times=8)
    res = resources(sandbox, tmp_path, max_attempts=2, backoff_base_s=0.01)
    defs = dg.Definitions(assets=[transactions], jobs=[ingest_job], resources=res)
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("records", [record])
        failed = rerun(defs, instance, record, ["transactions"])
        assert not failed.success
        (row,) = statuses(defs, instance, None, [record])
        assert row.products["transactions"] == "failed" and row.needs_action == ["transactions"]
        assert not lake_ids(tmp_path, record)
        again = rerun(defs, instance, record, ["transactions"])  # the sandbox stopped failing
        assert again.success
        (row,) = statuses(defs, instance, None, [record])
        assert row.products["transactions"] == "landed" and not row.needs_action
    assert_equals_truth(sandbox, tmp_path, record)


def test_income_before_transactions_is_checked_when_they_land(sandbox, tmp_path):
    made = create(sandbox, accounts=1, months=3, volume=5, seed=21)
    record = made["record"]
    with dg.DagsterInstance.ephemeral() as instance:
        early = land([income], record, resources(sandbox, tmp_path), instance)
        assert early.success  # not failed for want of transactions
        assert not evaluations(early, "income_matches_transactions")
        later = land([transactions], record, resources(sandbox, tmp_path), instance)
        assert later.success
        (verdict,) = evaluations(later, "income_matches_transactions")
        assert verdict.passed and verdict.partition == record


def test_a_batched_run_reports_each_record_on_its_own(sandbox, tmp_path):
    made = [create(sandbox, accounts=1, months=1, volume=v, seed=30 + v) for v in (2, 6, 12)]
    keys = [m["record"] for m in made]
    res = resources(sandbox, tmp_path)
    defs = dg.Definitions(assets=[transactions], resources=res,
                          jobs=[dg.define_asset_job("batch", selection=[transactions])])
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("records", keys)
        out = defs.resolve_job_def("batch").execute_in_process(
            instance=instance, tags={"dagster/asset_partition_range_start": keys[0],
                                     "dagster/asset_partition_range_end": keys[-1]})
    assert out.success
    mats = {m.partition: m.metadata for m in out.asset_materializations_for_node("transactions")}
    assert set(mats) == set(keys)
    lake = Lake(root=str(tmp_path))
    counts = {k: mats[k]["dagster/row_count"].value for k in keys}
    assert counts == {k: lake.read("transactions", k).num_rows for k in keys}
    assert len(set(counts.values())) == 3  # each its own, not the run's total
    for k in keys:
        assert mats[k]["fetched_rows"].value == counts[k]
        assert mats[k]["preview"].value.count("\n") >= 2
    verdicts = {e.partition: e.passed for e in evaluations(out, "running_balance_reconciles")}
    assert verdicts == dict.fromkeys(keys, True)


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

    from assets.warehouse import build

    made = create(frozen_sandbox, accounts=5, months=35, volume=200, seed=77, settlement=False)
    record = made["record"]
    want = truth(frozen_sandbox, record)
    assert sum(a["lines"] for a in want["accounts"]) >= 1_000_000
    with dg.DagsterInstance.ephemeral() as instance:
        assert land([transactions], record, resources(frozen_sandbox, tmp_path / "lake"),
                    instance).success
    target = tmp_path / "w.duckdb"
    build(tmp_path / "lake", target)
    with duckdb.connect(str(target), read_only=True) as con:
        got = dict(con.execute(
            "select account_id, (sum(amount) * 100)::hugeint from transactions group by 1"
        ).fetchall())
        flows = dict(con.execute(
            "select account_id, (sum(inflow) * 100)::hugeint from monthly_cashflow group by 1"
        ).fetchall())
    assert got == {a["account"]: a["net_kobo"] for a in want["accounts"]}
    assert flows == {a["account"]: a["credit_kobo"] for a in want["accounts"]}
