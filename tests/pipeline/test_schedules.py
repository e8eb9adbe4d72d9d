"""The daily refresh: the inbox's connected records, a page of them per run."""

from __future__ import annotations

import datetime as dt
import gc

import dagster as dg
import pytest

from assets.batch import RECORDS_PER_RUN, batch_config, ranges
from pipeline.schedules import daily_refresh
from resources.inbox import Inbox, describe, kept_body
from resources.inbox.resource import InboxResource


@pytest.fixture
def inbox_with_states(tmp_path, monkeypatch, make):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    with Inbox(path, create=True) as inbox:
        for i in (5, 3, 0, 4, 1, 2):  # paged in the order first heard of: their numbers
            inbox.add(make.callback(f"rec{i}", customer=f"cust{i}"))
        inbox.add(make.disconnect("cust2", "2026-11-02T00:00:00.000Z"))
        inbox.add(make.reauth("cust4", "2026-11-02T00:00:00.000Z"))
        states = {r: s.status for r, s in inbox.records().items()}
    assert states["rec2"] == "disconnected" and states["rec4"] == "reauth_required"
    return path


def refresh_requests() -> list[dg.RunRequest]:
    with dg.instance_for_test() as instance:
        # entered: the context opens an instance of its own for the resources, which only
        # its exit closes
        with dg.build_schedule_context(
                instance=instance, resources={"inbox": InboxResource()},
                scheduled_execution_time=dt.datetime(2026, 11, 22, 2, tzinfo=dt.UTC)) as ctx:
            out = daily_refresh(ctx)
    return out if isinstance(out, dg.SkipReason) else list(out)


def batch(request: dg.RunRequest) -> list[str]:
    """The records a request lands: its batch names their numbers."""
    numbers = request.run_config["resources"]["batch"]["config"]["records"]
    with InboxResource().open() as db:
        ids = db.ids_of(numbers)
    return [ids[n] for n in numbers]


def test_daily_refresh_skips_disconnected_and_reauth(inbox_with_states):
    (request,) = refresh_requests()
    assert batch(request) == ["rec5", "rec3", "rec0", "rec1"]  # connected ones, in order
    assert request.run_config == batch_config([1, 2, 3, 5])
    assert request.run_key == "refresh-2026-11-22-1"
    assert request.tags["ledgerlake/schedule"] == "daily_refresh"
    assert request.tags["ledgerlake/records"] == "4"
    assert not any(f"rec{i}" in str(request.tags) for i in range(6))  # by number only
    # the day rides along: the transactions asset reconciles a seventh of the records in full
    assert request.tags["ledgerlake/refresh_day"] == "2026-11-22"
    # evaluated again (a retried tick), the same keys: no second run
    assert [r.run_key for r in refresh_requests()] == [request.run_key]


def test_connected_records_are_paged_one_run_per_page(tmp_path, monkeypatch, make):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    records = [f"r{i:05d}" for i in range(2 * RECORDS_PER_RUN + 2)]
    with Inbox(path, create=True) as inbox:
        inbox.add_described([(describe(b), kept_body(b)) for b in (
            make.callback(r, customer=f"c{r}") for r in records)])
        inbox.add(make.disconnect(f"c{records[7]}", "2026-11-02T00:00:00.000Z"))
    connected = records[:7] + records[8:]
    requests = refresh_requests()
    pages = [batch(r) for r in requests]
    assert [len(p) for p in pages] == [RECORDS_PER_RUN, RECORDS_PER_RUN, 1]
    assert [r for p in pages for r in p] == connected  # each once, in order; the gone left out
    assert [r.run_key for r in requests] == [
        f"refresh-2026-11-22-{r.run_config['resources']['batch']['config']['records'][0]}"
        for r in requests]
    assert [r.tags["ledgerlake/records"] for r in requests] == [str(len(p)) for p in pages]
    # a big run names its records by ranges, in one tag; only a small one has a tag each
    numbers = [r.run_config["resources"]["batch"]["config"]["records"] for r in requests]
    assert [r.tags["ledgerlake/record_numbers"] for r in requests] == [
        ranges(n) for n in numbers]
    assert [sum(k.startswith("ledgerlake/record-") for k in r.tags) for r in requests] == \
        [0, 0, 1]


def test_record_numbers_as_ranges():
    assert ranges([5, 1, 2, 3, 9, 7, 8, 3]) == "1-3,5,7-9"
    assert ranges([]) == "" and ranges([4]) == "4"
    cut = ranges(list(range(1, 4000, 2)))  # every other number: no range to fold
    assert len(cut) == 1000 and cut.endswith("...")


def test_nothing_connected_skips(tmp_path, monkeypatch, make):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    with Inbox(path, create=True) as inbox:
        inbox.add(make.callback("gone", customer="c1"))
        inbox.add(make.disconnect("c1", "2026-11-02T00:00:00.000Z"))
    skipped = refresh_requests()
    assert isinstance(skipped, dg.SkipReason) and "no record is connected" in \
        skipped.skip_message


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
