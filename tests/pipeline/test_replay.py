"""Replay: which records are overdue, and `/callback/trigger` on the real sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pipeline.replay import TRIGGER_LIMIT, overdue, replay
from resources.inbox import Inbox
from resources.inbox.resource import InboxResource
from tests.conftest import deliveries
from tests.ground_truth import wait

HOUR = 3600.0


@pytest.fixture
def inbox(tmp_path):
    with Inbox(tmp_path / "inbox.sqlite3", create=True) as ib:
        yield ib


def test_overdue_records(inbox, make):
    inbox.add(make.callback("waiting", "AUTH", "AUTH_SUCCESS"))
    inbox.add(make.callback("waiting", "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    inbox.add(make.callback("complete", "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    inbox.add(make.callback("complete", "TRANSACTIONS", "PRODUCT_IS_READY"))
    inbox.add(make.callback("periodic", "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    inbox.add(make.callback("periodic", "PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY"))
    inbox.add(make.callback("gone", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="cg"))
    inbox.add(make.disconnect("cg", "2030-01-01T00:00:00.000Z"))
    now = time.time()

    assert overdue(inbox, after_s=HOUR, now=now) == []  # nobody has waited an hour yet
    late = overdue(inbox, after_s=HOUR, now=now + 2 * HOUR)
    assert [(o.record, o.missing) for o in late] == [("waiting", ("TRANSACTIONS",))]
    assert late[0].waiting_s >= 2 * HOUR - 60

    # replayed records get a delay's time before they are asked for again
    result = replay(inbox, None, after_s=HOUR, now=now + 2 * HOUR, dry_run=True)
    assert [o.record for o in result.overdue] == ["waiting"] and result.calls == 0
    inbox.mark_replayed(["waiting"], now + 2 * HOUR)
    assert overdue(inbox, after_s=HOUR, now=now + 2.5 * HOUR) == []
    assert [o.record for o in overdue(inbox, after_s=HOUR, now=now + 3.5 * HOUR)] == ["waiting"]
    # what counts as expected is a choice
    assert {o.record for o in overdue(inbox, after_s=0, now=now + 4 * HOUR,
                                      expect=("IDENTITY",))} == {"waiting", "complete",
                                                                  "periodic"}


def cli(*args, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)


def wait_for(predicate, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not (ok := predicate()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return ok


def sandbox_now(sandbox) -> str:
    return sandbox.control("clock/advance", seconds=0)["now"]


def wait_acknowledged(sandbox, sent: dict[str, list[str]], since: str) -> None:
    """Until the sandbox says each record's callbacks of these methods were delivered again
    (raised at or after `since`) and acknowledged: the receiver stores a callback before it
    answers, so the inbox then holds all that the re-sending will bring."""
    left = {(r, m) for r, methods in sent.items() for m in methods}

    def done() -> bool:
        for record in sorted({r for r, _ in left}):
            got = deliveries(sandbox, record, [m for r, m in left if r == record])
            left.difference_update((record, m) for m, d in got.items() if d is not None
                                   and d["raised_at"] >= since and d["state"] == "acknowledged")
        return not left

    wait(f"the sandbox to have re-sent {sum(map(len, sent.values()))} callbacks, acknowledged",
         done, 120, every_s=0.2)


@pytest.mark.slow
def test_replay_brings_back_a_lost_callback_from_the_real_sandbox(sandbox, receiver):
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
        made = api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 1, "months": 1, "products": ["accounts", "transactions"]},
            {"accounts": 2, "months": 1, "products": ["accounts", "transactions"]}]})
        assert made.status_code == 200, made.text
    records = sorted(c["record"] for c in made.json()["data"]["customers"])

    def methods():
        with Inbox(receiver.inbox) as ib:
            return sorted((e.record, e.method) for e in ib.after(0) if e.kind == "callback")

    assert wait_for(lambda: {(r, "TRANSACTIONS") for r in records} <= set(methods()))
    before = methods()
    # the TRANSACTIONS callbacks are lost for good (say, a receiver down for over 72 hours)
    with Inbox(receiver.inbox) as ib:
        ib._db.execute("delete from events where method = 'TRANSACTIONS'")
        ib._db.execute("delete from record_products where method = 'TRANSACTIONS'")
    env = {"LEDGERLAKE_INBOX": str(receiver.inbox), "LEDGERLAKE_API_URL": sandbox.url,
           "LEDGERLAKE_ENVIRONMENT": "sandbox", "LEDGERLAKE_SECRET_KEY": sandbox.sandbox_key}

    dry = cli("replay", "--after-minutes", "0", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert all(f"record {r}: no TRANSACTIONS" in dry.stdout for r in records)
    assert "2 records overdue; would trigger 2 in 0 calls" in dry.stdout
    assert {m for _, m in methods()} == {"ACCOUNTS"}  # a dry run calls nothing

    since = sandbox_now(sandbox)
    done = cli("replay", "--after-minutes", "0", env=env)
    assert done.returncode == 0, done.stderr
    assert "2 records overdue; triggered 2 in 1 calls" in done.stdout
    # the sandbox re-sends each record's latest callbacks: once it says each was acknowledged,
    # the lost ones are back, and those still held are not doubled
    wait_acknowledged(sandbox, {r: sorted({m for rr, m in before if rr == r})
                                for r in records}, since)
    assert methods() == before
    # asked again at once, nothing is overdue any more
    again = cli("replay", "--after-minutes", "0", env=env)
    assert "0 records overdue" in again.stdout


@pytest.mark.slow
def test_replay_calls_at_most_100_records_and_the_dagster_job(sandbox, receiver, tmp_path,
                                                               monkeypatch):
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
        records = []
        for _ in range(2):
            made = api.post("sandbox/customers/create", json={"customers": [
                {"accounts": 1, "months": 1, "products": ["accounts"]}] * 80})
            assert made.status_code == 200, made.text
            records += [c["record"] for c in made.json()["data"]["customers"]]
    assert wait_for(lambda: Inbox(receiver.inbox).count() >= len(records), 60)
    with Inbox(receiver.inbox) as ib:
        count = ib.count()
        sent: dict[str, list[str]] = {}
        for e in ib.after(0, 10_000):
            sent.setdefault(e.record, []).append(e.method)
    assert set(sent) == set(records)
    since = sandbox_now(sandbox)

    monkeypatch.setenv("LEDGERLAKE_INBOX", str(receiver.inbox))
    monkeypatch.setenv("LEDGERLAKE_HOME", str(tmp_path / "home"))
    from dagster import DagsterInstance

    from pipeline.jobs import replay_job
    from resources.client.resource import ConnectionClient

    client = ConnectionClient(base_url=sandbox.url, environment="sandbox",
                              secret_key=sandbox.sandbox_key)
    config = {"ops": {"replay_missing_callbacks": {"config": {"after_minutes": 0.0}}}}
    with DagsterInstance.ephemeral() as instance:
        out = replay_job.execute_in_process(run_config=config, instance=instance,
                                            resources={"client": client, "inbox": InboxResource()})
    assert out.success
    assert out.output_for_node("replay_missing_callbacks") == len(records) == 160
    meta = [e for e in out.all_events if e.event_type_value == "STEP_OUTPUT"][0]
    shown = meta.event_specific_data.metadata
    assert shown["calls"].value == 2 == -(-len(records) // TRIGGER_LIMIT)
    assert shown["triggered"].value == 160
    # the re-sent callbacks are duplicates: once the sandbox says each was acknowledged
    # again, the inbox has not grown
    wait_acknowledged(sandbox, sent, since)
    with Inbox(receiver.inbox) as ib:
        assert ib.count() == count


@pytest.mark.slow
def test_replay_by_name_brings_back_a_record_the_inbox_never_heard_of(sandbox, receiver):
    """Every callback of a record linked while no receiver answered, for longer than the
    service redelivers, is dropped: the inbox cannot know it is missing, the application
    (which has its id from the connect page) names it."""
    env = {"LEDGERLAKE_INBOX": str(receiver.inbox), "LEDGERLAKE_API_URL": sandbox.url,
           "LEDGERLAKE_ENVIRONMENT": "sandbox", "LEDGERLAKE_SECRET_KEY": sandbox.sandbox_key}
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": "http://127.0.0.1:9/callbacks/",
                                           "token": receiver.token}).raise_for_status()
        made = api.post("sandbox/customers/create", json={"customers": [
            {"accounts": 1, "months": 1, "products": ["accounts", "transactions"]}]})
        assert made.status_code == 200, made.text
        record = made.json()["data"]["customers"][0]["record"]
        api.post("sandbox/clock/advance", json={"seconds": 73 * HOUR}).raise_for_status()
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()

    def methods():
        with Inbox(receiver.inbox, create=True) as ib:
            return sorted(e.method for e in ib.after(0) if e.record == record)

    assert "0 records overdue" in cli("replay", "--after-minutes", "0", env=env).stdout
    refused = cli("replay", "--records", f"{record},not a record", env=env)
    assert refused.returncode == 2 and "--records takes record ids" in refused.stderr
    dry = cli("replay", "--records", record, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"record {record}: never heard of" in dry.stdout
    assert "1 records named; would trigger 1 in 0 calls" in dry.stdout
    # lost for good: the sandbox tried each of the record's callbacks (the first ones and the
    # periodic ones of the days that passed) at the address it had when they were raised,
    # and none reached us; nothing comes back by itself
    wait("the sandbox to have tried the record's callbacks", lambda: all(
        d is not None and d["attempts"] and d["state"] in ("pending", "dropped")
        for d in deliveries(sandbox, record, ["ACCOUNTS", "TRANSACTIONS"]).values()),
         60, every_s=0.2)
    assert methods() == []

    done = cli("replay", "--records", record, env=env)
    assert done.returncode == 0, done.stderr
    assert "1 records named; triggered 1 in 1 calls" in done.stdout
    # its latest callback of each kind (the periodic one of the days that passed too)
    assert wait_for(lambda: {"ACCOUNTS", "TRANSACTIONS"} <= set(methods())), methods()
