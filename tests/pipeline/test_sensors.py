"""The inbox sensor through build_sensor_context over a real inbox file: which runs a tick
asks for, over which batches of records (their run config), keyed how."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster import DagsterInstance, SensorResult, SkipReason, build_sensor_context

from assets.accounts import accounts
from assets.batch import RECORDS_PER_RUN, batch_config
from pipeline.freshness import freshness_checks
from pipeline.jobs import ingest_job
from pipeline.sensors import BATCH, NEW_PER_RUN, PARALLEL, READY, inbox_sensor, plan, route
from resources.inbox import Inbox, describe, kept_body
from resources.inbox.resource import InboxResource

SENSOR = inbox_sensor()  # as the Definitions build it, LEDGERLAKE_FORGET_ON_DISCONNECT unset


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as inst:  # no run queue: the sensor spreads over PARALLEL
        yield inst


def evaluate(defs, instance, cursor=None):
    with build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                              resources={"inbox": InboxResource()}) as ctx:
        return SENSOR(ctx)


def names(defs) -> set[str]:
    return {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}


def batch(rr: dg.RunRequest) -> list[str]:
    """The records a run request lands: its run config's batch names their numbers."""
    numbers = rr.run_config["resources"]["batch"]["config"]["records"]
    assert all(isinstance(n, int) for n in numbers)
    with InboxResource().open() as db:
        ids = db.ids_of(numbers)
    return [ids[n] for n in numbers]


def products(rr: dg.RunRequest) -> tuple[str, ...]:
    return tuple(sorted(k.to_user_string() for k in rr.asset_selection))


def test_ready_products_become_runs_keyed_by_inbox_event(inbox, defs, instance, make):
    present = names(defs)
    r1 = "rec1"
    ids = {}
    ids["auth"] = inbox.add(make.callback(r1, "AUTH", "AUTH_SUCCESS"))[0]
    accounts_ready = make.callback(r1, "ACCOUNTS", "ACCOUNTS_SUCCESS", account="a1")
    ids["accounts"] = inbox.add(accounts_ready)[0]
    inbox.add(make.callback(r1, "BALANCE", "BALANCE_SUCCESS", account="a1"))
    ids["balances"] = inbox.add(make.callback(r1, "BALANCE", "BALANCE_SUCCESS",
                                              account="a2"))[0]
    ids["transactions"] = inbox.add(make.callback(r1, "TRANSACTIONS", "PRODUCT_IS_READY",
                                                  newTransactions=12))[0]
    # a redelivery: no new event
    assert not inbox.add({**accounts_ready, "serverResponse": {"status": 500}})[1]

    result = evaluate(defs, instance)
    assert isinstance(result, SensorResult)
    # its AUTH lands its payments (none yet: empty), with the products it asked for
    expected = tuple(name for name in ("accounts", "balances", "payments", "transactions")
                     if name in present)
    # every event of the record makes one run of all the assets they ask for, over its batch
    (rr,) = result.run_requests
    assert products(rr) == expected
    last = ids["transactions"]
    assert rr.run_key == f"inbox-{last}-{'-'.join(expected)}"  # the newest event, the products
    assert rr.run_config == batch_config([inbox.numbers([r1])[r1]]) and batch(rr) == [r1]
    assert rr.job_name == ingest_job.name
    assert rr.partition_key is None and not result.dynamic_partitions_requests
    assert rr.tags["ledgerlake/inbox_event"] == str(last)
    assert rr.tags["ledgerlake/methods"] == "AUTH,ACCOUNTS,BALANCE,TRANSACTIONS"
    assert rr.tags["ledgerlake/records"] == "1"
    # a small run: a tag the UI's run filter finds the record by, and its number's range
    number = inbox.numbers([r1])[r1]
    assert rr.tags[f"ledgerlake/record-{number}"] == "carried"
    assert rr.tags["ledgerlake/record_numbers"] == str(number)
    assert r1 not in str(rr.tags) and r1 not in rr.run_key  # a record is named by its number
    assert result.cursor == str(last)

    # a tick retried from the same cursor asks for the very same runs: their keys are spent
    again = evaluate(defs, instance)
    assert [(r.run_key, r.run_config) for r in again.run_requests] == \
        [(rr.run_key, rr.run_config)]
    # the next tick starts after the cursor
    assert isinstance(evaluate(defs, instance, result.cursor), SkipReason)


def test_records_wanting_the_same_products_share_a_run(inbox, defs, instance, make):
    """A tick's runs carry exactly the records whose callbacks asked for them, in the order
    they called, one run per product set."""
    inbox.add(make.callback("r1", "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    inbox.add(make.callback("r2", "BALANCE", "BALANCE_SUCCESS", account="a2"))
    inbox.add(make.callback("r3", "AUTH", "AUTH_SUCCESS"))  # connected: its payments, none
    inbox.add(make.callback("r4", "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    inbox.add(make.callback("r5", "INCOME", "INCOME_FAILED", status="is_failed"))
    inbox.add(make.callback("r2", "ACCOUNTS", "ACCOUNTS_SUCCESS"))
    last = inbox.add(make.callback("r6", "BALANCE", "BALANCE_SUCCESS", account="a6"))[0]
    result = evaluate(defs, instance)
    runs = {products(rr): (batch(rr), rr) for rr in result.run_requests}
    assert {p: b for p, (b, _) in runs.items()} == {
        ("accounts",): ["r1", "r4"],
        ("accounts", "balances"): ["r2"],  # its two callbacks: one run of both products
        ("balances",): ["r6"], ("payments",): ["r3"]}
    for b, rr in runs.values():
        numbers = inbox.numbers(b)
        assert rr.run_config == batch_config([numbers[r] for r in b])
        assert rr.tags["ledgerlake/records"] == str(len(b))
    assert runs[("balances",)][1].run_key == f"inbox-{last}-balances"
    assert runs[("accounts",)][1].tags["ledgerlake/methods"] == "ACCOUNTS"


def test_runs_are_only_requested_for_assets_in_the_definitions(inbox, instance, make):
    @dg.asset(name="balances", group_name="elsewhere")  # a namesake outside the products
    def stray() -> None:
        return None

    only_accounts = dg.Definitions(assets=[accounts, stray], jobs=[ingest_job],
                                   sensors=[SENSOR],
                                   # ingest_job leaves them out by name: they must exist
                                   asset_checks=freshness_checks,
                                   # forget_job (a target of the sensor) reads the inbox and
                                   # the warehouse too
                                   resources={"client": None, "lake": None, "inbox": None,
                                              "batch": None, "warehouse_db": None})
    inbox.add(make.callback("r1", "BALANCE", "BALANCE_SUCCESS", account="a1"))
    inbox.add(make.callback("r1", "INCOME", "PRODUCT_IS_READY"))
    acc = inbox.add(make.callback("r1", "ACCOUNTS", "ACCOUNTS_SUCCESS"))[0]
    result = evaluate(only_accounts, instance)
    assert [(rr.run_key, products(rr), batch(rr)) for rr in result.run_requests] == \
        [(f"inbox-{acc}-accounts", ("accounts",), ["r1"])]
    # the job the requests name holds exactly the assets that exist
    job = only_accounts.resolve_job_def(ingest_job.name)
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == {"accounts"}


def test_failures_start_nothing_and_are_observed(inbox, defs, instance, make):
    """A tick's failure callbacks make one observation per asset, none a run."""
    present = names(defs)
    first = inbox.add(make.callback("r2", "INCOME", "INCOME_FAILED", status="is_failed",
                                    message="no income found"))[0]
    inbox.add(make.callback("r2", "PAYMENT", "PAYMENT_FAILED", status="is_failed"))
    inbox.add(make.callback("r2", "TRANSACTIONS", "PRODUCT_IS_READY", status="is_failed"))
    second = inbox.add(make.callback("r3", "INCOME", "INCOME_FAILED", status="is_failed"))[0]
    result = evaluate(defs, instance)
    assert result.run_requests == [] and not result.dynamic_partitions_requests
    seen = {o.asset_key.to_user_string(): o.metadata for o in result.asset_events}
    wanted: dict[str, list[str]] = {}
    for asset, code in (("income", "INCOME_FAILED"), ("payments", "PAYMENT_FAILED"),
                        ("transactions", "PRODUCT_IS_READY"), ("income", "INCOME_FAILED")):
        wanted.setdefault(asset if asset in present else "record_status", []).append(code)
    assert {a: [e["code"] for e in m["first_events"].value] for a, m in seen.items()} == wanted
    income = seen["income"]
    assert (income["failure_callbacks"].value, income["records"].value) == (2, 2)
    numbers = inbox.numbers(["r2", "r3"])  # what Dagster is told of a record
    assert [(e["inbox_event"], e["record"], e["message"], e["record_status"])
            for e in income["first_events"].value] == [
        (first, numbers["r2"], "no income found", "connected"),
        (second, numbers["r3"], "", "connected")]
    assert all(o.partition is None for o in result.asset_events)


def test_disconnected_and_reauth_records_are_not_fetched(inbox, defs, instance, make):
    inbox.add(make.callback("r3", "AUTH", "AUTH_SUCCESS", customer="c3",
                            ended_at="2026-01-01T00:00:00.000Z"))
    first = evaluate(defs, instance)
    gone = inbox.add({"event": "USER_DISCONNECT", "message": "", "record": "r3",
                      "data": {"accounts": [], "customer": "c3", "record": "r3",
                               "disconnected_at": "2026-01-02T00:00:00.000Z"}})[0]
    # a product that was ready before the disconnect, delivered late
    late = inbox.add(make.callback("r3", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c3",
                                   ended_at="2026-01-01T00:10:00.000Z"))[0]
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
    # what the sensor logs of them: each connection event, and each product it did not fetch
    events = inbox.after(int(first.cursor))
    status = {r: s.status for r, s in inbox.records(["r3", "r4"]).items()}
    numbers = inbox.numbers(["r3", "r4"])
    _, _, notes = plan(events, names(defs), status, numbers)
    n3, n4 = numbers["r3"], numbers["r4"]
    assert f"event {gone}: USER_DISCONNECT for record #{n3}" in notes
    assert f"event {late}: record #{n3} is disconnected; ACCOUNTS not fetched" in notes
    assert any(f"record #{n4} is reauth_required; ACCOUNTS not fetched" in n for n in notes)
    # the record's history stays in the inbox
    assert set(inbox.records(["r3"])["r3"].products) == {"AUTH", "ACCOUNTS"}


def test_every_ask_says_why(inbox, defs, make):
    """Whatever an event asks for, even nothing, `route` says why in a line."""
    unnamed = {k: v for k, v in make.callback("x", "BALANCE", "BALANCE_SUCCESS").items()
               if k not in ("record", "recordId")}
    bodies = [make.callback("r1", "AUTH", "AUTH_SUCCESS", customer="c1"),
              make.callback("r1", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c1"),
              make.callback("r1", "PERIODIC_BALANCE", "BALANCE_SUCCESS", account="a1"),
              make.callback("r1", "INCOME", "INCOME_FAILED", status="is_failed"),
              make.callback("r1", "TRANSACTIONS", "PRODUCT_IS_READY", status="is_failed"),
              make.callback("r1", "ACCOUNTS", "NOT_A_CODE"), unnamed,
              make.callback("r2", "AUTH", "AUTH_SUCCESS", customer="c2"),
              make.reauth("c2", "2026-01-02T00:00:00.000Z"),
              make.callback("r2", "ACCOUNTS", "ACCOUNTS_SUCCESS", customer="c2"),
              make.disconnect("c2", "2026-01-03T00:00:00.000Z")]
    for body in bodies:
        inbox.add(body)
    events = inbox.after(0)
    status = {r: s.status for r, s in inbox.records(["r1", "r2"]).items()}
    numbers = inbox.numbers(["r1", "r2"])
    present = names(defs)
    asks = [route(ev, present, fetchable, status, known)
            for fetchable in (present, {"balances"})  # a deployment that fetches less
            for known in (numbers, {})  # the records forgotten since
            for ev in events]
    assert {a.kind for a in asks} == {"fetch", "periodic", "failure", "connection", "nothing"}
    assert all(a.why.strip() for a in asks), [a for a in asks if not a.why.strip()]


def add_all(inbox: Inbox, bodies: list[dict]) -> None:
    """Many callbacks in one transaction (one disk sync)."""
    inbox.add_described([(describe(b), kept_body(b)) for b in bodies])


def drain_batches(defs, instance) -> tuple[list[list[list[str]]], str | None]:
    """Evaluate the sensor until the inbox is read: each tick's runs' batches, the cursor."""
    cursor, ticks = None, []
    while not isinstance(result := evaluate(defs, instance, cursor), SkipReason):
        ticks.append([batch(rr) for rr in result.run_requests])
        for rr in result.run_requests:
            assert rr.tags["ledgerlake/records"] == str(len(batch(rr)))
        cursor = result.cursor
    return ticks, cursor


def test_a_backlog_drains_in_bounded_batches(inbox, defs, instance, make):
    """BATCH events a tick; a burst of new records is spread over the runs the instance runs
    at once (PARALLEL where it sets no limit), a trickle over runs of NEW_PER_RUN."""
    records = [f"r{i:04d}" for i in range(BATCH * 2 + NEW_PER_RUN + 7)]
    add_all(inbox, [make.callback(r, "ACCOUNTS", "ACCOUNTS_SUCCESS") for r in records])
    ticks, cursor = drain_batches(defs, instance)
    assert [len(runs) for runs in ticks] == [PARALLEL, PARALLEL, 2]
    assert [len(b) for b in ticks[0]] == [BATCH // PARALLEL] * PARALLEL
    assert [len(b) for b in ticks[2]] == [NEW_PER_RUN, 7]  # a trickle: small runs
    assert [r for runs in ticks for b in runs for r in b] == records  # each once, in order
    assert int(cursor) == inbox.count()


def test_no_run_holds_more_than_records_per_run(inbox, defs, make):
    """One run at a time: a tick's burst still goes in runs of at most RECORDS_PER_RUN."""
    records = [f"r{i:04d}" for i in range(BATCH)]
    add_all(inbox, [make.callback(r, "ACCOUNTS", "ACCOUNTS_SUCCESS") for r in records])
    with dg.instance_for_test(overrides={"concurrency": {"runs": {
            "max_concurrent_runs": 1}}}) as instance:
        ticks, _ = drain_batches(defs, instance)
    assert [[len(b) for b in runs] for runs in ticks] == [
        [RECORDS_PER_RUN] * (BATCH // RECORDS_PER_RUN)]
    assert [r for runs in ticks for b in runs for r in b] == records


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
    assert meta["failure_callbacks"].value == 1
    (shown,) = meta["first_events"].value
    assert (shown["record"], shown["code"], shown["message"]) == \
        (inbox.numbers(["r5"])["r5"], "INCOME_FAILED", "statement unreadable")
    assert instance.get_run_records() == []


def test_periodic_callbacks_of_many_records_are_batched(inbox, defs, instance, make):
    """The daily periodic callbacks of many records make one run per product set (of up to
    RECORDS_PER_RUN records), not one run per record; a record that also has a first callback
    keeps its own run, and a disconnected one is left out."""
    keys = [f"p{i:02d}" for i in range(12)]
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
    last = inbox.add(make.callback("p03", "ACCOUNTS", "ACCOUNTS_SUCCESS",
                                   ended_at="2026-01-02T00:00:00.000Z"))[0]
    result = evaluate(defs, instance, first.cursor)
    runs = {(rr.run_key.split("-")[0], products(rr)): batch(rr) for rr in result.run_requests}
    assert runs == {
        ("inbox", ("accounts", "balances", "transactions")): ["p03"],  # its own run takes all
        # p05 is disconnected: not fetched
        ("periodic", ("balances", "transactions")): [
            "p00", "p01", "p02", "p04", "p06", "p07", "p08", "p10", "p11"],
        ("periodic", ("transactions",)): ["p09"],
    }
    own = next(rr for rr in result.run_requests if rr.run_key.startswith("inbox-"))
    assert own.run_key == f"inbox-{last}-accounts-balances-transactions"
    assert own.tags["ledgerlake/methods"] == "PERIODIC_TRANSACTIONS,PERIODIC_BALANCE,ACCOUNTS"
    assert len({rr.run_key for rr in result.run_requests}) == len(result.run_requests)


# -- the warehouse follows the lake -------------------------------------------------------------

def follow(instance, lake):
    from pipeline.sensors import warehouse_follows_lake

    with build_sensor_context(instance=instance, resources={"lake": lake}) as ctx:
        return warehouse_follows_lake(ctx)


def built_over(instance, versions: dict, only: tuple[str, ...] = ()) -> None:
    """Published views (all, or `only` these) whose build read these lake versions."""
    from assets.warehouse import VIEWS, view_key, view_reads

    for view in VIEWS:
        if not only or view.name in only:
            read = {t: v for t, v in versions.items() if t in view_reads(view)}
            instance.report_runless_asset_event(dg.AssetMaterialization(
                view_key(view.name), metadata={"lake_versions": dg.MetadataValue.json(read)}))


def picked(request: dg.RunRequest) -> list[str]:
    return sorted("/".join(k.path) for k in request.asset_selection)


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
    # the accounts view alone is stale, and those of `records`, which the run rewrites
    assert picked(again) == ["record_status", "warehouse/accounts", "warehouse/records"]
    built_over(instance, {"accounts": landed}, only=("accounts",))
    assert isinstance(follow(instance, lake), SkipReason)


def test_a_view_is_rebuilt_with_the_views_that_read_it(tmp_path, instance):
    import pyarrow as pa

    from resources.lake import Lake

    lake = Lake(root=str(tmp_path / "lake"))
    built_over(instance, {})
    moved = lake.write("transactions", "rec1", pa.table({"transaction_id": ["t1"]}),
                       pa.schema([("transaction_id", pa.string())]))
    request = follow(instance, lake)
    assert request.tags["ledgerlake/lake_moved"] == f"transactions={moved}"
    # the lake tables derived from transactions too, before the views that read them
    assert picked(request) == sorted(["record_status", "daily_balances", "monthly_cashflow",
                                      *(f"warehouse/{v}" for v in [
                                          "transactions", "daily_balances",
                                          "monthly_cashflow", "records"])])


def test_a_view_is_rebuilt_with_the_views_of_its_derived_family(tmp_path, instance):
    """Found by the chaos suite: `daily_balances` was built over the newest transactions,
    `transactions` over older ones; the next build took `transactions` alone, pinned it newer
    than the kept `daily_balances` was derived from, and readers saw lines with no balance."""
    import pyarrow as pa

    from resources.lake import Lake

    lake = Lake(root=str(tmp_path / "lake"))
    rows = pa.table({"transaction_id": ["t1"]})
    older = lake.write("transactions", "rec1", rows, rows.schema)
    built_over(instance, {"transactions": older})
    newer = lake.write("transactions", "rec2", rows, rows.schema)
    built_over(instance, {"transactions": newer}, only=("daily_balances", "monthly_cashflow"))
    request = follow(instance, lake)  # the transactions view alone is behind
    assert picked(request) == sorted(["record_status", "daily_balances", "monthly_cashflow",
                                      *(f"warehouse/{v}" for v in [
                                          "transactions", "daily_balances",
                                          "monthly_cashflow", "records"])])


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
