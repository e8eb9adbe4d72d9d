"""The inbox sensor through build_sensor_context over a real inbox file."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster import DagsterInstance, SensorResult, SkipReason, build_sensor_context

from assets.accounts import accounts
from pipeline.jobs import ingest_job
from pipeline.sensors import BATCH, NEW_PER_RUN, READY, inbox_sensor
from resources.inbox import Inbox
from resources.inbox.resource import InboxResource


@pytest.fixture
def inbox(tmp_path, monkeypatch):
    path = tmp_path / "inbox.sqlite3"
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(path))
    with Inbox(path, create=True) as ib:
        yield ib


@pytest.fixture(scope="module")
def defs():
    from pipeline.definitions import defs

    return defs


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as inst:
        yield inst


def evaluate(defs, instance, cursor=None):
    with build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                              resources={"inbox": InboxResource()}) as ctx:
        return inbox_sensor(ctx)


def names(defs) -> set[str]:
    return {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}


def test_ready_products_become_runs_keyed_by_inbox_event(inbox, defs, instance, make):
    present = names(defs)
    r1 = "rec1"
    ids = {}
    ids["auth"] = inbox.add(make.callback(r1, "AUTH", "AUTH_SUCCESS"))[0]
    accounts_ready = make.callback(r1, "ACCOUNTS", "ACCOUNTS_SUCCESS", account="a1")
    ids["accounts"] = inbox.add(accounts_ready)[0]
    b1 = inbox.add(make.callback(r1, "BALANCE", "BALANCE_SUCCESS", account="a1"))[0]
    ids["balances"] = inbox.add(make.callback(r1, "BALANCE", "BALANCE_SUCCESS",
                                              account="a2"))[0]
    ids["transactions"] = inbox.add(make.callback(r1, "TRANSACTIONS", "PRODUCT_IS_READY",
                                                  newTransactions=12))[0]
    # a redelivery: no new event
    assert not inbox.add({**accounts_ready, "serverResponse": {"status": 500}})[1]

    result = evaluate(defs, instance)
    assert isinstance(result, SensorResult)
    expected = [name for name in ("accounts", "balances", "transactions") if name in present]
    # every event of the record makes one run of all the assets they ask for
    (rr,) = result.run_requests
    assert [k.to_user_string() for k in rr.asset_selection] == expected
    assert rr.run_key == f"inbox-{ids['transactions']}"  # keyed by the newest event
    assert rr.partition_key == r1
    assert rr.job_name == ingest_job.name
    assert rr.tags["ledgerlake/inbox_event"] == str(ids["transactions"])
    assert rr.tags["ledgerlake/inbox_events"] == ",".join(
        str(i) for i in (ids["accounts"], b1, ids["balances"], ids["transactions"]))
    assert rr.tags["ledgerlake/methods"] == "ACCOUNTS,BALANCE,TRANSACTIONS"
    (add,) = result.dynamic_partitions_requests
    assert list(add.partition_keys) == [r1]
    assert result.cursor == str(ids["transactions"])

    # the next tick starts after the cursor
    assert isinstance(evaluate(defs, instance, result.cursor), SkipReason)


def test_runs_are_only_requested_for_assets_in_the_definitions(inbox, instance, make):
    @dg.asset(name="balances", group_name="elsewhere")  # a namesake outside the products
    def stray() -> None:
        return None

    only_accounts = dg.Definitions(assets=[accounts, stray], jobs=[ingest_job],
                                   sensors=[inbox_sensor],
                                   # forget_job (a target of the sensor) reads the inbox and
                                   # the warehouse too
                                   resources={"client": None, "lake": None, "inbox": None,
                                              "warehouse_db": None})
    inbox.add(make.callback("r1", "BALANCE", "BALANCE_SUCCESS", account="a1"))
    inbox.add(make.callback("r1", "INCOME", "PRODUCT_IS_READY"))
    acc = inbox.add(make.callback("r1", "ACCOUNTS", "ACCOUNTS_SUCCESS"))[0]
    result = evaluate(only_accounts, instance)
    assert [(rr.run_key, [k.to_user_string() for k in rr.asset_selection])
            for rr in result.run_requests] == [(f"inbox-{acc}", ["accounts"])]
    # the job the requests name holds exactly the assets that exist
    job = only_accounts.resolve_job_def(ingest_job.name)
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == {"accounts"}


def test_failures_start_nothing_and_are_observed(inbox, defs, instance, make):
    present = names(defs)
    inbox.add(make.callback("r2", "INCOME", "INCOME_FAILED", status="is_failed",
                            message="no income found"))
    inbox.add(make.callback("r2", "PAYMENT", "PAYMENT_FAILED", status="is_failed"))
    inbox.add(make.callback("r2", "TRANSACTIONS", "PRODUCT_IS_READY", status="is_failed"))
    result = evaluate(defs, instance)
    assert result.run_requests == []
    assert [list(r.partition_keys) for r in result.dynamic_partitions_requests] == [["r2"]]
    seen = {(o.asset_key.to_user_string(), o.partition, o.metadata["code"].value)
            for o in result.asset_events}
    wanted = set()
    for asset, code in (("income", "INCOME_FAILED"), ("payments", "PAYMENT_FAILED"),
                        ("transactions", "PRODUCT_IS_READY")):
        if asset in present:
            wanted.add((asset, "r2", code))
        elif "record_status" in present:
            wanted.add(("record_status", None, code))
    assert seen == wanted
    income = [o for o in result.asset_events if o.metadata["code"].value == "INCOME_FAILED"]
    assert all(o.metadata["message"].value == "no income found" for o in income)


def test_disconnected_and_reauth_records_are_not_fetched(inbox, defs, instance, make):
    inbox.add(make.callback("r3", "AUTH", "AUTH_SUCCESS", customer="c3",
                            ended_at="2026-01-01T00:00:00.000Z"))
    first = evaluate(defs, instance)
    inbox.add({"event": "USER_DISCONNECT", "message": "", "record": "r3",
               "data": {"accounts": [], "customer": "c3", "record": "r3",
                        "disconnected_at": "2026-01-02T00:00:00.000Z"}})
    # a product that was ready before the disconnect, delivered late
    inbox.add(make.callback("r3", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c3",
                            ended_at="2026-01-01T00:10:00.000Z"))
    inbox.add(make.callback("r4", "AUTH", "AUTH_SUCCESS", customer="c4",
                            ended_at="2026-01-01T00:00:00.000Z"))
    inbox.add(make.reauth("c4", "2026-01-02T00:00:00.000Z"))
    inbox.add(make.callback("r4", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c4",
                            ended_at="2026-01-03T00:10:00.000Z"))
    result = evaluate(defs, instance, first.cursor)
    # nothing is fetched; the statuses (and, after them, the warehouse) are rebuilt
    (rebuild,) = result.run_requests
    assert rebuild.job_name == "warehouse_job"
    assert [k.to_user_string() for k in rebuild.asset_selection] == ["record_status"]
    assert inbox.status("r3") == "disconnected" and inbox.status("r4") == "reauth_required"
    if "record_status" in names(defs):
        statuses = {(o.metadata["record"].value, o.metadata["status"].value)
                    for o in result.asset_events if o.asset_key.to_user_string() == "record_status"}
        assert statuses == {("r3", "disconnected"), ("r4", "reauth_required")}
    # the record's history stays in the inbox
    assert set(inbox.records(["r3"])["r3"].products) == {"AUTH", "ACCOUNTS"}


def test_a_backlog_drains_in_bounded_batches(inbox, defs, instance, make):
    for i in range(BATCH * 2 + 17):
        inbox.add(make.callback(f"r{i}", "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    cursor, sizes, covered = None, [], []
    while not isinstance(result := evaluate(defs, instance, cursor), SkipReason):
        sizes.append(len(result.run_requests))
        added = list(result.dynamic_partitions_requests[0].partition_keys)
        for rr in result.run_requests:  # new records side by side share runs
            if rr.partition_key:
                covered.append(rr.partition_key)
                continue
            start = added.index(rr.tags["dagster/asset_partition_range_start"])
            end = added.index(rr.tags["dagster/asset_partition_range_end"])
            assert end - start + 1 == int(rr.tags["ledgerlake/records"]) <= NEW_PER_RUN
            covered += added[start:end + 1]
        cursor = result.cursor
    assert sizes == [BATCH // NEW_PER_RUN, BATCH // NEW_PER_RUN, 1]
    assert covered == [f"r{i}" for i in range(BATCH * 2 + 17)]  # each record once, in order
    assert int(cursor) == inbox.count()


def test_every_ready_product_of_the_spec_has_a_line():
    spec = {("AUTH", "AUTH_SUCCESS"), ("IDENTITY", "PRODUCT_IS_READY"),
            ("ACCOUNTS", "ACCOUNTS_SUCCESS"), ("BALANCE", "BALANCE_SUCCESS"),
            ("PERIODIC_BALANCE", "BALANCE_SUCCESS"), ("TRANSACTIONS", "PRODUCT_IS_READY"),
            ("PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY"), ("INCOME", "PRODUCT_IS_READY"),
            ("PAYMENT", "PAYMENT_SUCCESS")}
    assert spec <= set(READY)


def test_tick_stores_failures_as_observations_the_ui_shows(inbox, defs, instance, make):
    from dagster import AssetKey

    from pipeline.local import tick

    present = names(defs)
    inbox.add(make.callback("r5", "INCOME", "INCOME_FAILED", status="is_failed",
                            message="statement unreadable"))
    assert tick(defs, instance) == []  # no run
    asset = "income" if "income" in present else "record_status"
    (obs,) = instance.fetch_observations(AssetKey(asset), limit=10).records
    meta = obs.asset_observation.metadata
    assert meta["code"].value == "INCOME_FAILED"
    assert meta["message"].value == "statement unreadable"
    assert instance.get_dynamic_partitions("records") == ["r5"]


def test_periodic_callbacks_of_many_records_are_batched(inbox, defs, instance, make):
    """The daily periodic callbacks of many records make one run per product set and
    contiguous range of records, not one run per record; a record that also has a first
    callback keeps its own run, and a disconnected one splits the range."""
    keys = [f"p{i:02d}" for i in range(12)]
    instance.add_dynamic_partitions("records", keys)
    for key in keys:
        inbox.add(make.callback(key, "AUTH", "AUTH_SUCCESS", customer=f"c-{key}",
                                ended_at="2026-01-01T00:00:00.000Z"))
    inbox.add(make.disconnect("c-p05", "2026-01-01T06:00:00.000Z"))
    first = evaluate(defs, instance)
    for key in keys:
        inbox.add(make.callback(key, "PERIODIC_TRANSACTIONS", "PRODUCT_IS_READY",
                                ended_at="2026-01-02T00:00:00.000Z", newTransactions=3))
        if key != "p09":  # p09 sends no periodic balance: another product set
            inbox.add(make.callback(key, "PERIODIC_BALANCE", "BALANCE_SUCCESS",
                                    account=f"a-{key}", ended_at="2026-01-02T00:00:00.000Z"))
    inbox.add(make.callback("p03", "ACCOUNTS", "ACCOUNTS_SUCCESS",
                            ended_at="2026-01-02T00:00:00.000Z"))
    result = evaluate(defs, instance, first.cursor)
    runs = {}
    for rr in result.run_requests:
        products = tuple(sorted(k.to_user_string() for k in rr.asset_selection))
        span = (rr.partition_key,) if rr.partition_key else (
            rr.tags["dagster/asset_partition_range_start"],
            rr.tags["dagster/asset_partition_range_end"])
        runs[span] = products
    assert runs == {
        ("p03",): ("accounts", "balances", "transactions"),  # its own run takes all
        ("p00", "p02"): ("balances", "transactions"),
        ("p04", "p04"): ("balances", "transactions"),  # p05 is disconnected: not fetched
        ("p06", "p08"): ("balances", "transactions"),
        ("p10", "p11"): ("balances", "transactions"),
        ("p09", "p09"): ("transactions",),
    }
    assert len({rr.run_key for rr in result.run_requests}) == len(result.run_requests)


# -- the warehouse follows the lake -------------------------------------------------------------

def follow(instance, lake):
    from pipeline.sensors import warehouse_follows_lake

    with build_sensor_context(instance=instance, resources={"lake": lake}) as ctx:
        return warehouse_follows_lake(ctx)


def built_over(instance, versions: dict) -> None:
    """A published warehouse whose build read these lake versions."""
    instance.report_runless_asset_event(dg.AssetMaterialization(
        "warehouse", metadata={"lake_versions": dg.MetadataValue.json(versions)}))


def test_a_landing_during_a_warehouse_build_is_built_again(tmp_path, instance):
    """Found by the chaos suite: a record that landed while the warehouse was being built was
    missing from the published file, and nothing built it again (the build's materialization
    was newer than the landing, though its snapshot was older). Versions decide, not times."""
    import pyarrow as pa

    from resources.lake import Lake

    lake = Lake(root=str(tmp_path / "lake"))
    schema = pa.schema([("account_id", pa.string())])
    first = follow(instance, lake)  # never built: the views exist before anything lands
    assert isinstance(first, dg.RunRequest) and first.tags["ledgerlake/lake_moved"] == \
        "never built"
    built_over(instance, {})
    assert isinstance(follow(instance, lake), SkipReason)  # an empty lake, already built

    read = lake.write("accounts", "rec1", pa.table({"account_id": ["a1"]}), schema)
    # the build reads version `read`; a record lands before its materialization is stored
    landed = lake.write("accounts", "rec2", pa.table({"account_id": ["a2"]}), schema)
    built_over(instance, {"accounts": read})
    again = follow(instance, lake)
    assert isinstance(again, dg.RunRequest)
    assert again.tags["ledgerlake/lake_moved"] == f"accounts={landed}"
    built_over(instance, {"accounts": landed})
    assert isinstance(follow(instance, lake), SkipReason)


def test_the_warehouse_is_never_built_twice_at_once(tmp_path, instance):
    import pyarrow as pa
    from dagster._core.test_utils import create_run_for_test

    from resources.lake import Lake

    lake = Lake(root=str(tmp_path / "lake"))
    lake.write("accounts", "rec1", pa.table({"account_id": ["a1"]}))
    for status in (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED):
        run = create_run_for_test(instance, job_name="warehouse_job", status=status)
        skipped = follow(instance, lake)
        assert isinstance(skipped, SkipReason) and "queued or running" in skipped.skip_message
        instance.delete_run(run.run_id)
    assert isinstance(follow(instance, lake), dg.RunRequest)
