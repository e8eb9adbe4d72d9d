"""Freshness per record: a connected record's balances and transactions landed within 26
hours, as the inbox's landing state says; a disconnected one, or one waiting for
reauthentication, is never stale, nor one whose product never landed."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from pipeline import freshness as fresh
from resources.inbox import HELD, LANDED_OK, Inbox, LandingState

HOUR = 3600.0
NOW = time.time()


@pytest.fixture
def inbox(tmp_path, monkeypatch, make):
    """Six records; their balances landed at these times (`held` was published two hours ago,
    and held back by a check since), their transactions all now."""
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    with Inbox(path, create=True) as db:
        for record in ("old", "new", "gone", "reauth", "never", "held"):
            db.add(make.callback(record, "AUTH", "AUTH_SUCCESS", customer=f"c-{record}",
                                 ended_at="2026-01-01T00:00:00.000Z"))
        db.add(make.disconnect("c-gone", "2026-01-02T00:00:00.000Z"))
        db.add(make.reauth("c-reauth", "2026-01-02T00:00:00.000Z"))

        def landed(record: str, product: str, at: float, outcome: str = LANDED_OK):
            return LandingState(record, product, outcome, "run-1", at)

        db.save_landings([landed(r, "balances", NOW - 2 * HOUR)
                          for r in ("old", "gone", "reauth", "held")])
        db.save_landings([landed("new", "balances", NOW - HOUR),
                          landed("held", "balances", NOW, HELD)])
        db.save_landings([landed(r, "transactions", NOW) for r in ("old", "new", "held")])
    return path


def evaluations(instance) -> dict[str, dg.AssetCheckEvaluation]:
    """Run `freshness_job` as the schedule does; each check's evaluation."""
    from pipeline.definitions import defs

    job = defs.resolve_job_def("freshness_job")
    assert job.execute_in_process(instance=instance, raise_on_error=False).success
    out = {}
    for asset in fresh.CHECKED:
        key = dg.AssetCheckKey(dg.AssetKey(asset), fresh.CHECK_NAME)
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
        out[asset] = record.evaluation
    return out


def at(monkeypatch, now: float) -> None:
    monkeypatch.setattr(fresh, "clock", lambda: now)


def test_stale_means_connected_and_not_landed_since_the_cutoff(inbox, monkeypatch):
    with Inbox(inbox) as db:  # the checks name records by number
        n = db.numbers(["held", "new", "old"])
    with dg.instance_for_test() as instance:
        at(monkeypatch, NOW)
        for got in evaluations(instance).values():
            assert got.passed and got.metadata["stale_records"].value == 0
            # old, new and held: connected, and landed once; never gone, reauth or never
            assert got.metadata["connected_records"].value == 3
            assert got.metadata["stale"].value == []

        # 26 hours after `old` landed and a half before `new` did: old is stale, and so is
        # held, whose newest rows were held back (its last publication is what counts)
        at(monkeypatch, NOW - 1.5 * HOUR + fresh.MAX_AGE.total_seconds())
        got = evaluations(instance)
        balances = got["balances"]
        assert not balances.passed and balances.severity == dg.AssetCheckSeverity.WARN
        assert balances.metadata["stale"].value == [n["held"], n["old"]]
        assert balances.metadata["stale_records"].value == 2
        assert balances.description == "2 of 3 connected records not refreshed in 26 hours"
        assert balances.metadata["cutoff"].value == pytest.approx(NOW - 1.5 * HOUR)
        assert got["transactions"].passed  # landed now

        # a day and more on, every connected one; never the disconnected, the one waiting
        # for reauthentication, or the one whose balances never landed
        at(monkeypatch, NOW + 27 * HOUR)
        got = evaluations(instance)
        assert got["balances"].metadata["stale"].value == [n["held"], n["new"], n["old"]]
        assert got["transactions"].metadata["stale"].value == [n["held"], n["new"], n["old"]]


def test_the_checks_run_by_schedule_and_only_there(inbox):
    from pipeline.definitions import defs

    schedule = {s.name: s for s in defs.schedules}["hourly_freshness"]
    assert schedule.job_name == "freshness_job"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    # a run over a batch leaves them out: it would record them skipped over their verdict
    checks = {job: {k.name for k in defs.resolve_job_def(job).asset_layer.asset_graph
                    .asset_check_keys} for job in ("ingest_job", "refresh_job", "freshness_job")}
    assert fresh.CHECK_NAME not in checks["ingest_job"] | checks["refresh_job"]
    assert checks["freshness_job"] == {fresh.CHECK_NAME}
