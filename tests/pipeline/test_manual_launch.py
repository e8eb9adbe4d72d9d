"""A run launched by hand as the Launchpad opens it (the default config: no records) is refused
before it starts; one given an empty list of records fails at once, saying how to name them,
and lands nothing: no green run that fetched nothing, no check left Skipped, no "did not yield
expected outputs". And a run launched by hand is tagged manual, wherever launched from."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from assets.balances import balances
from assets.batch import NAME_THEM, Batch, batch_config
from assets.transactions import transactions
from pipeline.freshness import freshness_checks
from pipeline.jobs import refresh_job
from resources.client.resource import ConnectionClient
from resources.config import Tuning
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from tests.conftest import connected


def test_a_refresh_launched_with_no_records_refuses_and_says_how(tmp_path):
    """The Launchpad's default config names no record: refused before a run exists. Records
    given as an empty list: the run fails at once, saying how to name them."""
    # the job leaves out the freshness checks: they are the definitions' too
    defs = dg.Definitions(assets=[balances, transactions], asset_checks=freshness_checks,
                          jobs=[refresh_job], resources={
        # never called: nothing is fetched (port 9 on loopback answers nobody)
        "client": ConnectionClient(base_url="http://127.0.0.1:9", secret_key="sk_test_x",
                                   environment="sandbox"),
        "lake": Lake(root=str(tmp_path / "lake")),
        "inbox": InboxResource(path=connected(tmp_path / "inbox.sqlite3", ["r1"])),
        "batch": Batch.configure_at_launch(), "tuning": Tuning()})
    job = defs.resolve_job_def("refresh_job")
    with pytest.raises(dg.DagsterInvalidConfigError, match="records"):
        dg.validate_run_config(job, {})
    with dg.DagsterInstance.ephemeral() as instance:
        out = job.execute_in_process(instance=instance, raise_on_error=False,
                                     run_config=batch_config([]))
        assert not out.success
        failures = [e for e in out.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
        assert {e.step_key for e in failures} == {"balances", "transactions"}
        assert all(NAME_THEM in e.event_specific_data.error.message for e in failures)
        kinds = {e.event_type for e in out.all_events}
        assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in kinds  # said once, not retried
        assert dg.DagsterEventType.ASSET_MATERIALIZATION not in kinds
        assert dg.DagsterEventType.ASSET_CHECK_EVALUATION not in kinds  # no verdict, no skip
        logs = " ".join(str(e.message) for e in out.all_events)
        assert "expected outputs" not in logs
    assert not (tmp_path / "lake" / "transactions").exists()
    assert "resources: batch: config: records: [1, 2]" in NAME_THEM
    assert "ledgerlake status" in refresh_job.description and "Launch all" in \
        refresh_job.description


def test_who_launched_a_run_by_its_tags():
    """The daemon keys the runs it starts for daily_refresh and the inbox sensor; a copy of
    their requests launched from a preview carries their tags but no key: manual."""
    from assets.batch import launched_by

    schedule = {"ledgerlake/schedule": "daily_refresh", "ledgerlake/refresh_day": "2026-11-28",
                "dagster/schedule_name": "daily_refresh"}
    sensor = {"ledgerlake/inbox_event": "7", "ledgerlake/methods": "BALANCE",
              "dagster/sensor_name": "inbox_sensor"}
    key = {"dagster/run_key": "k-1"}
    assert launched_by({**schedule, **key}) == "schedule"  # the daemon, at 02:00
    assert launched_by(schedule) == "manual"  # the schedule's preview, Open in Launchpad
    assert launched_by({**sensor, **key}) == "sensor"
    assert launched_by(sensor) == "manual"  # the sensor's preview
    assert launched_by({k: v for k, v in {**sensor, **key}.items()
                        if k != "dagster/sensor_name"}) == "sensor"  # ticked in process
    assert launched_by({"ledgerlake/rerun": "cli"}) == launched_by({}) == "manual"


def test_a_run_copied_from_the_schedules_preview_is_manual(sandbox, tmp_path):
    """daily_refresh's tick as the UI's preview evaluates it, launched by hand: the run is
    tagged manual and its balance snapshots say so, not `schedule`."""
    from pipeline.schedules import daily_refresh

    record = sandbox.customer(accounts=1, months=1)["record"]
    inbox = connected(tmp_path / "inbox.sqlite3", [record])
    res = {"client": ConnectionClient(base_url=sandbox.url, secret_key=sandbox.sandbox_key,
                                      environment="sandbox"),
           "lake": Lake(root=str(tmp_path / "lake")), "inbox": InboxResource(path=inbox),
           "batch": Batch.configure_at_launch(), "tuning": Tuning()}
    defs = dg.Definitions(assets=[balances, transactions], asset_checks=freshness_checks,
                          jobs=[refresh_job], schedules=[daily_refresh], resources=res)
    with dg.DagsterInstance.ephemeral() as instance:
        with dg.build_schedule_context(instance=instance, resources={"inbox": res["inbox"]},
                                       scheduled_execution_time=dt.datetime.now(dt.UTC),
                                       repository_def=defs.get_repository_def()) as context:
            (request,) = daily_refresh.evaluate_tick(context).run_requests
        assert request.tags["dagster/schedule_name"] == "daily_refresh"
        out = defs.resolve_job_def("refresh_job").execute_in_process(
            instance=instance, run_config=request.run_config, tags=request.tags,
            asset_selection=[dg.AssetKey("balances")])
        assert out.success
        assert instance.get_run_by_id(out.run_id).tags["ledgerlake/launched"] == "manual"
    history = Lake(root=str(tmp_path / "lake")).read("balance_history", record)
    assert set(history["source"].to_pylist()) == {"manual"}
