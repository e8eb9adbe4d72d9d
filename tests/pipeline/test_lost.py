"""The net under lost runs (pipeline/lost.py) over a real inbox file and Dagster instance: a
product called back for and never landed is asked for again, once, when nothing is queued."""

from __future__ import annotations

import time

from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    SkipReason,
    build_sensor_context,
)

from pipeline import lost
from pipeline.jobs import ingest_job
from pipeline.lost import look, lost_fetches
from resources.inbox import Inbox, LandingState, describe, kept_body
from resources.inbox.resource import InboxResource


def evaluate(defs, instance, cursor=None):
    with build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                              resources={"inbox": InboxResource()}) as ctx:
        return lost_fetches(ctx)


def names(defs) -> tuple[set[str], set[str]]:
    job = defs.resolve_job_def(ingest_job.name)
    return ({k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()},
            {k.to_user_string() for k in job.asset_layer.executable_asset_keys})


def landed(inbox: Inbox, record: str, product: str, at: float, outcome: str = "landed"):
    inbox.save_landings([LandingState(record, product, outcome, "run-1", at, landed_at=at)])


def test_only_products_never_landed_since_their_callback_are_asked_for(inbox, defs, make):
    inbox.add(make.callback("lost1", "ACCOUNTS", "ACCOUNTS_SUCCESS", account="a1"))
    inbox.add(make.callback("lost1", "IDENTITY", "PRODUCT_IS_READY"))
    inbox.add(make.callback("lost1", "INCOME", "PRODUCT_IS_READY"))
    # landed after its callback, whatever the outcome: a failure is an alert, not a loss
    inbox.add(make.callback("done1", "ACCOUNTS", "ACCOUNTS_SUCCESS", account="a2"))
    inbox.add(make.callback("done1", "INCOME", "PRODUCT_IS_READY"))
    landed(inbox, "done1", "accounts", time.time() + 1)
    landed(inbox, "done1", "income", time.time() + 1, outcome="failed")
    # landed, then called back for again and not landed since: asked for again
    landed(inbox, "again1", "transactions", time.time() - 1)
    inbox.add(make.callback("again1", "PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY"))
    # a failure callback asks for no fetch; a disconnected record's callbacks are left alone
    inbox.add(make.callback("failed1", "INCOME", "INCOME_FAILED", status="is_failed"))
    inbox.add(make.callback("gone1", "ACCOUNTS", "ACCOUNTS_SUCCESS", account="a3",
                            customer="cust-gone"))
    inbox.add(make.disconnect("cust-gone", "2026-01-02T00:00:00.000Z"))

    asks, numbers, reached = look(inbox, 0, time.time(), *names(defs))
    wanted = {(a.event.record, a.assets) for a in asks}
    assert wanted == {("lost1", ("accounts",)), ("lost1", ("identity",)),
                      ("lost1", ("income",)), ("again1", ("transactions",))}
    assert set(numbers) >= {"lost1", "again1"} and reached > 0
    # a look that ends before the callbacks came finds nothing
    assert look(inbox, 0, time.time() - 3600, *names(defs))[0] == []


def test_the_sensor_asks_once_and_only_when_no_fetch_is_under_way(inbox, defs, make,
                                                                  monkeypatch):
    monkeypatch.setattr(lost, "GRACE_S", 0.0)  # the callbacks below count as old enough
    inbox.add(make.callback("lost2", "ACCOUNTS", "ACCOUNTS_SUCCESS", account="a1"))
    inbox.add(make.callback("lost2", "IDENTITY", "PRODUCT_IS_READY"))
    number = inbox.numbers(["lost2"])["lost2"]
    with DagsterInstance.ephemeral() as instance:
        running = instance.add_run(DagsterRun(job_name=ingest_job.name,
                                             status=DagsterRunStatus.STARTED))
        skipped = evaluate(defs, instance)
        assert isinstance(skipped, SkipReason) and "queued or in progress" in skipped.skip_message

        instance.report_run_failed(running)  # the lost run: it ended, nothing landed
        result = evaluate(defs, instance)
        assert isinstance(result, SensorResult)
        (rr,) = result.run_requests
        assert rr.run_key.startswith("lost-") and rr.job_name == ingest_job.name
        assert {k.to_user_string() for k in rr.asset_selection} == {"accounts", "identity"}
        assert rr.run_config["resources"]["batch"]["config"]["records"] == [number]
        # the next look starts where this one ended: each callback is looked at once
        again = evaluate(defs, instance, result.cursor)
        assert isinstance(again, SkipReason) or not again.run_requests


def test_a_look_stopped_by_its_limit_goes_on_from_the_last_callback_read(inbox, defs, make,
                                                                         monkeypatch):
    monkeypatch.setattr(lost, "LIMIT", 2)
    for n in range(3):
        inbox.add(make.callback(f"many{n}", "ACCOUNTS", "ACCOUNTS_SUCCESS", account=f"a{n}"))
    first, _, reached = look(inbox, 0, time.time(), *names(defs))
    assert [a.event.record for a in first] == ["many0"]  # many1 may share its time with more
    seen = [a.event.record for a in first]
    for _ in range(3):
        asks, _, reached = look(inbox, reached, time.time(), *names(defs))
        seen += [a.event.record for a in asks]
    assert seen == ["many0", "many1", "many2"]  # each once, in order


def test_a_limit_cutting_through_a_batch_of_callbacks_reads_the_batch_next_time(
        inbox, defs, make, monkeypatch):
    # one batch is stored at one received_at: a cut inside it must not skip its rest
    monkeypatch.setattr(lost, "LIMIT", 3)
    inbox.add(make.callback("early", "ACCOUNTS", "ACCOUNTS_SUCCESS", account="a0"))
    time.sleep(0.01)
    inbox.add_described([(describe(b), kept_body(b)) for b in (
        make.callback(f"batch{n}", "ACCOUNTS", "ACCOUNTS_SUCCESS", account=f"b{n}")
        for n in range(3))])
    seen, since = [], 0.0
    for _ in range(3):
        asks, _, since = look(inbox, since, time.time(), *names(defs))
        seen += [a.event.record for a in asks]
    assert sorted(seen) == ["batch0", "batch1", "batch2", "early"]


def test_a_batch_alone_filling_the_limit_is_read_whole(inbox, defs, make, monkeypatch):
    monkeypatch.setattr(lost, "LIMIT", 2)
    inbox.add_described([(describe(b), kept_body(b)) for b in (
        make.callback(f"batch{n}", "ACCOUNTS", "ACCOUNTS_SUCCESS", account=f"b{n}")
        for n in range(3))])
    asks, _, reached = look(inbox, 0, time.time(), *names(defs))
    assert sorted(a.event.record for a in asks) == ["batch0", "batch1", "batch2"]
    assert look(inbox, reached, time.time(), *names(defs))[0] == []
