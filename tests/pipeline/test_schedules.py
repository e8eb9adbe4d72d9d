"""The daily refresh: connected records only, in contiguous batches of partitions."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from assets.partitions import batches
from pipeline.inbox import Inbox
from pipeline.inbox_resource import InboxResource
from pipeline.schedules import daily_refresh


def test_batches_are_contiguous_and_bounded():
    keys = list("abcdefgh")
    assert list(batches(keys, set("abdefgh"), size=2)) == [
        ("a", "b", 2), ("d", "e", 2), ("f", "g", 2), ("h", "h", 1)]
    assert list(batches(keys, set(), size=2)) == []
    assert list(batches(keys, set(keys), size=100)) == [("a", "h", 8)]


@pytest.fixture
def inbox_with_states(tmp_path, monkeypatch, make):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    with Inbox(path, create=True) as inbox:
        for i in range(6):
            inbox.add(make.callback(f"rec{i}", customer=f"cust{i}"))
        inbox.add(make.disconnect("cust2", "2026-11-02T00:00:00.000Z"))
        inbox.add(make.reauth("cust4", "2026-11-02T00:00:00.000Z"))
        states = {r: s.status for r, s in inbox.records().items()}
    assert states["rec2"] == "disconnected" and states["rec4"] == "reauth_required"
    return path


def test_daily_refresh_skips_disconnected_and_reauth(inbox_with_states):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("records", [f"rec{i}" for i in range(6)] + ["manual"])
        ctx = dg.build_schedule_context(
            instance=instance, resources={"inbox": InboxResource()},
            scheduled_execution_time=dt.datetime(2026, 11, 22, 2, tzinfo=dt.UTC))
        requests = list(daily_refresh(ctx))
    ranges = [(r.tags["dagster/asset_partition_range_start"],
               r.tags["dagster/asset_partition_range_end"]) for r in requests]
    assert ranges == [("rec0", "rec1"), ("rec3", "rec3"), ("rec5", "manual")]
    assert all(r.run_key.startswith("refresh-2026-11-22-") for r in requests)
    assert {r.tags["ledgerlake/schedule"] for r in requests} == {"daily_refresh"}
    # the day rides along: the transactions asset reconciles a seventh of the records in full
    assert {r.tags["ledgerlake/refresh_day"] for r in requests} == {"2026-11-22"}


def test_replay_runs_hourly_by_default():
    from pipeline.definitions import defs

    schedules = {s.name: s for s in defs.schedules}
    replay = schedules["hourly_replay"]
    assert replay.job_name == "replay_job" and replay.cron_schedule == "17 * * * *"
    assert replay.default_status == dg.DefaultScheduleStatus.RUNNING
    assert schedules["daily_refresh"].job_name == "refresh_job"
