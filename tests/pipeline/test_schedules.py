"""The daily refresh: connected records only, in contiguous batches of partitions."""

from __future__ import annotations

import datetime as dt
import gc

import dagster as dg
import pytest

from assets.partitions import batches
from pipeline.schedules import daily_refresh
from resources.inbox import Inbox
from resources.inbox.resource import InboxResource


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


def refresh_requests() -> list[dg.RunRequest]:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("records", [f"rec{i}" for i in range(6)] + ["manual"])
        # entered: the context opens an instance of its own for the resources, which only
        # its exit closes
        with dg.build_schedule_context(
                instance=instance, resources={"inbox": InboxResource()},
                scheduled_execution_time=dt.datetime(2026, 11, 22, 2, tzinfo=dt.UTC)) as ctx:
            return list(daily_refresh(ctx))


def test_daily_refresh_skips_disconnected_and_reauth(inbox_with_states):
    requests = refresh_requests()
    ranges = [(r.tags["dagster/asset_partition_range_start"],
               r.tags["dagster/asset_partition_range_end"]) for r in requests]
    assert ranges == [("rec0", "rec1"), ("rec3", "rec3"), ("rec5", "manual")]
    assert all(r.run_key.startswith("refresh-2026-11-22-") for r in requests)
    assert {r.tags["ledgerlake/schedule"] for r in requests} == {"daily_refresh"}
    # the day rides along: the transactions asset reconciles a seventh of the records in full
    assert {r.tags["ledgerlake/refresh_day"] for r in requests} == {"2026-11-22"}


def test_a_schedule_evaluation_leaves_no_dead_instance_behind(inbox_with_states):
    """A schedule context left open once let the garbage collector, at some later moment,
    set Dagster's current definitions-state storage back to that of this test's instance,
    dead by then: the next `materialize` in the same process failed with "Attempted to
    resolve undefined DagsterInstance weakref"."""
    from dagster._core.storage.defs_state.base import DefsStateStorage

    assert refresh_requests()
    gc.collect()
    assert DefsStateStorage.get() is None


def test_replay_runs_hourly_by_default():
    from pipeline.definitions import defs

    schedules = {s.name: s for s in defs.schedules}
    replay = schedules["hourly_replay"]
    assert replay.job_name == "replay_job" and replay.cron_schedule == "17 * * * *"
    assert replay.default_status == dg.DefaultScheduleStatus.RUNNING
    assert schedules["daily_refresh"].job_name == "refresh_job"
