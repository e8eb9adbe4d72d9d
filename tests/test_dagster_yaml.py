"""The shipped dagster.yaml: the project's library logs reach a run's event log (the UI)."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

import dagster as dg

from assets.accounts import accounts
from resources.client.resource import ConnectionClient
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from tests.conftest import connected, land
from tests.resources.sandboxes import client_for, make_customers

REPO = Path(__file__).resolve().parents[1]


class _Seen(logging.Handler):
    """Sets `event` once the client has logged a retry."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("retrying "):
            self.event.set()


def test_a_client_retry_warning_lands_in_the_runs_event_log(sandbox, tmp_path):
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    with client_for(sandbox) as control:
        (one,) = make_customers(control, {"accounts": 1, "months": 1})
        record = one["record"]
        control.post("sandbox/maintenance", {"on": True})  # every call: 500, retried

        # maintenance ends once the asset's call has been refused and retried, not on a
        # timer: the run cannot finish before the warning, nor wait long after it
        seen = _Seen()
        client_log = logging.getLogger("ledgerlake.client")
        client_log.addHandler(seen)
        ended = threading.Thread(target=lambda: seen.event.wait(120) and control.post(
            "sandbox/maintenance", {"on": False}))
        ended.start()
        try:
            with dg.DagsterInstance.from_config(str(home)) as instance:
                client = ConnectionClient(base_url=sandbox.url, secret_key=sandbox.sandbox_key,
                                          environment="sandbox", max_attempts=1000,
                                          backoff_base_s=0.05, backoff_max_s=0.2)
                inbox = connected(tmp_path / "inbox.sqlite3", [record])
                result = land([accounts], [record], {
                    "client": client, "inbox": InboxResource(path=inbox),
                    "lake": Lake(root=str(tmp_path / "lake"))}, instance=instance)
                logs = instance.all_logs(result.run_id)
        finally:
            seen.event.set()  # let the thread go whatever happened
            ended.join()
            client_log.removeHandler(seen)
    assert result.success
    retried = [e for e in logs if e.level == logging.WARNING
               and e.user_message.startswith("retrying POST accounts/get")
               and "PLANNED_MAINTENANCE" in e.user_message]
    assert retried, [e.user_message for e in logs]
    assert retried[0].step_key == "accounts"  # shown with the step, in the run's log
    assert all(sandbox.sandbox_key not in e.user_message for e in logs)


def test_runs_that_die_are_retried_by_the_daemon_and_failed_steps_are_not(tmp_path):
    import shutil

    import dagster as dg

    shutil.copyfile(REPO / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 2
        assert instance.run_retries_retry_on_asset_or_op_failure is False


def test_on_one_box_the_service_pool_never_holds_a_step_back_and_a_hand_set_limit_stays(
        tmp_path):
    """dagster.yaml's default_limit of 1 (the one-writer pools) would otherwise let one
    fetching step run at a time across all runs; the demo's instance gives the service's
    pool a slot per run that may run at once, and keeps what an operator set."""
    from assets.publish import SERVICE_POOL
    from pipeline.cli.demo import dagster_home

    home = dagster_home(tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        storage = instance.event_log_storage
        runs = instance.get_concurrency_config().run_queue_config.max_concurrent_runs
        assert storage.get_concurrency_info(SERVICE_POOL).slot_count == runs == 4
        storage.initialize_concurrency_limit_to_default("duckdb")
        assert storage.get_concurrency_info("duckdb").slot_count == 1  # untouched
        storage.set_concurrency_slots(SERVICE_POOL, 2)  # dagster instance concurrency set
    dagster_home(tmp_path)  # `ledgerlake dev` again on the same data
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.event_log_storage.get_concurrency_info(SERVICE_POOL).slot_count == 2
