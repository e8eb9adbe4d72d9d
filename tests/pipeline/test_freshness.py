"""Freshness per record: a connected record's balances and transactions landed within 26
hours; a disconnected one, or one waiting for reauthentication, is never stale."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from pipeline import freshness as fresh
from resources.inbox import Inbox

DAY = 24 * 3600


def land(instance, asset: str, *records: str) -> float:
    """Materialize `asset` for each record now; the time of the last."""
    for record in records:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset, partition=record))
    got = instance.fetch_materializations(dg.AssetKey(asset), limit=1).records[0]
    return got.timestamp


def test_stale_means_connected_and_not_landed_since_the_cutoff():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("records", ["old", "new", "gone", "reauth", "never"])
        land(instance, "balances", "old", "gone", "reauth")
        time.sleep(0.02)
        last = land(instance, "balances", "new")
        states = {"old": "connected", "new": "connected", "gone": "disconnected",
                  "reauth": "reauth_required", "never": "connected"}

        now = fresh.freshness(instance, "balances", states)
        assert (now.expected, now.stale) == (2, [])
        # just under 26 hours after `new` landed: `old` (landed before it) is stale
        later = fresh.freshness(instance, "balances", states, now=last + 26 * 3600 - 0.01)
        assert (later.expected, later.stale) == (2, ["old"])
        # a day and more on, both connected ones; never the disconnected, the one waiting
        # for reauthentication, or the one whose balances never landed
        assert fresh.freshness(instance, "balances", states, now=last + 27 * 3600).stale == \
            ["new", "old"]
        assert fresh.freshness(instance, "transactions", states).expected == 0


@pytest.fixture
def inbox(tmp_path, monkeypatch, make):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    with Inbox(path, create=True) as db:
        for i in range(3):
            db.add(make.callback(f"rec{i}", customer=f"cust{i}"))
        db.add(make.disconnect("cust1", "2026-11-02T00:00:00.000Z"))
    return path


def test_the_checks_run_by_schedule_and_name_the_stale_records(inbox, monkeypatch):
    from pipeline.definitions import defs

    schedule = {s.name: s for s in defs.schedules}["hourly_freshness"]
    assert schedule.job_name == "freshness_job"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    job = defs.resolve_job_def("freshness_job")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("records", ["rec0", "rec1", "rec2"])
        for asset in fresh.CHECKED:
            land(instance, asset, "rec0", "rec1", "rec2")

        def evaluations():
            assert job.execute_in_process(instance=instance, raise_on_error=False).success
            out = {}
            for asset in fresh.CHECKED:
                key = dg.AssetCheckKey(dg.AssetKey(asset), fresh.CHECK_NAME)
                record = instance.event_log_storage.get_latest_asset_check_execution_by_key(
                    [key])[key]
                out[asset] = record.evaluation
            return out

        for got in evaluations().values():
            assert got.passed and got.metadata["connected_records"].value == 2
        monkeypatch.setattr(fresh, "clock", lambda: time.time() + DAY + 3 * 3600)
        for got in evaluations().values():  # rec1 is disconnected: never stale
            assert not got.passed and got.severity == dg.AssetCheckSeverity.WARN
            assert got.metadata["stale"].value == ["rec0", "rec2"]
            assert got.metadata["disconnected_or_reauth"].value == 1
