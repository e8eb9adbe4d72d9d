"""The real thing: dagster-daemon evaluates the inbox sensor and launches runs that land
every product of new records in the lake, with the sandbox and receiver as real processes;
then, with no one clicking anything, the warehouse follows (its automation sensor) and
`ledgerlake sql` answers for the new records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from pipeline.cli import demo
from pipeline.local import stop_process
from resources.inbox import open_inbox
from resources.lake import Lake
from tests.ground_truth import partitions

REPO = Path(__file__).resolve().parents[2]
PRODUCTS = ("accounts", "balance_history", "transactions", "income", "identity")
VIEW = AssetKey(["warehouse", "transactions"])  # built by every build here: all are whole


def recorded(dagster_home: Path) -> tuple[list, list, set[str]]:
    """What the instance holds: the ingest runs, the warehouse's builds, and the runs that
    materialized `transactions`."""
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    try:
        with DagsterInstance.get() as instance:
            return (instance.get_run_records(RunsFilter(job_name="ingest_job")),
                    instance.fetch_materializations(VIEW, limit=100).records,
                    {m.run_id for m in instance.fetch_materializations(
                        AssetKey("transactions"), limit=100).records})
    finally:
        del os.environ["DAGSTER_HOME"]


@pytest.mark.slow
def test_daemon_turns_callbacks_into_parquet(tmp_path, sandbox, receiver):
    home = tmp_path / "home"
    dagster_home = demo.dagster_home(home)  # as `ledgerlake dev` makes it, pools and all
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "LEDGERLAKE_HOME": str(home),
           "LEDGERLAKE_INBOX": str(receiver.inbox), "LEDGERLAKE_API_URL": sandbox.url,
           "LEDGERLAKE_ENVIRONMENT": "sandbox", "LEDGERLAKE_SECRET_KEY": sandbox.sandbox_key}
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
        made = api.post("sandbox/customers/create",
                        json={"customers": [{"accounts": 2, "months": 2}, {"months": 2}]})
        assert made.status_code == 200, made.text
    records = [c["record"] for c in made.json()["data"]["customers"]]

    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115
    daemon = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
         str(REPO / "workspace.yaml")], cwd=home, env=env, stdout=log, stderr=log)

    def landed() -> bool:
        lake = Lake(root=str(home / "lake"))
        return all(set(records) <= set(partitions(lake, table)) for table in PRODUCTS)

    def queryable() -> bool:
        """`ledgerlake sql` answers with every new record's transactions."""
        out = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "sql", "--format", "csv", "--output",
             str(tmp_path / "answer.csv"),
             "select distinct record_id from transactions order by 1"],
            cwd=home, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            return False
        return (tmp_path / "answer.csv").read_text().split()[1:] == sorted(records)

    try:
        deadline = time.monotonic() + 240
        while not landed():
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
            time.sleep(1)
        # the warehouse keeps up by itself: within two minutes of landing, no click; and its
        # build is recorded (a build publishes the views before its run reports them)
        deadline = time.monotonic() + 120
        while not (queryable() and recorded(dagster_home)[1]):
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the warehouse never showed the new records"
            time.sleep(2)
    finally:
        stop_process(daemon, timeout_s=30)
        log.close()

    runs, builds, landed_by = recorded(dagster_home)
    assert {r.dagster_run.status for r in runs} == {DagsterRunStatus.SUCCESS}
    ran = set()  # runs over batches of records: the records their callbacks asked for
    for r in runs:  # by number: Dagster never holds a record id
        ran |= set(r.dagster_run.run_config["resources"]["batch"]["config"]["records"])
    # each record's products landed, as the inbox keeps them, by the runs Dagster recorded
    with open_inbox(receiver.inbox) as inbox:
        assert set(inbox.ids_of(ran).values()) == set(records)
        states = inbox.landings(records)
    assert {(s.record, s.product) for s in states if s.outcome == "landed"} >= {
        (r, p) for r in records for p in ("accounts", "balances", "transactions", "income",
                                          "identity")}
    assert {s.run_id for s in states} <= {r.dagster_run.run_id for r in runs}
    assert {s.run_id for s in states if s.product == "transactions"} <= landed_by
    for r in records:
        table = Lake(root=str(home / "lake")).read("balance_history", r)
        assert set(table["source"].to_pylist()) == {"callback"}  # fetched on BALANCE
    assert 1 <= len(builds) <= 4  # a handful, not one per record or product


@pytest.mark.slow
def test_a_run_killed_holding_the_duckdb_slot_gives_it_back(tmp_path):
    """Found by the chaos suite: a warehouse build SIGKILLed while its step held the one slot
    of the "duckdb" pool kept that slot after its run was marked failed, so every later build
    waited for it forever. The shipped run monitoring (dagster.yaml) gives a dead run's slots
    back after free_slots_after_run_end_seconds, and the next build lands."""
    from dagster import DagsterEventType

    home = tmp_path / "home"
    dagster_home = demo.dagster_home(home)  # the shipped dagster.yaml, pools and all
    # its monitoring polled every 5 s instead of every minute, so that this takes seconds
    shipped = (dagster_home / "dagster.yaml").read_text()
    assert "poll_interval_seconds: 60" in shipped
    (dagster_home / "dagster.yaml").write_text(
        shipped.replace("poll_interval_seconds: 60", "poll_interval_seconds: 5"))
    with open_inbox(home / "inbox.sqlite3", create=True):
        pass  # empty: nothing to ingest, the warehouse sensor builds over an empty lake
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "LEDGERLAKE_HOME": str(home),
           "LEDGERLAKE_INBOX": str(home / "inbox.sqlite3"), "LEDGERLAKE_ENVIRONMENT": "sandbox"}
    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115
    daemon = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
         str(REPO / "workspace.yaml")], cwd=home, env=env, stdout=log, stderr=log)

    def pid_of(instance, run_id: str) -> int | None:
        for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
            if (entry.message or "").startswith("Started process for run (pid: "):
                return int(entry.message.split("pid: ")[1].rstrip(")."))
        return None

    def daemon_log() -> str:
        return (tmp_path / "daemon.log").read_text(errors="replace")[-3000:]

    def builds(instance) -> int:
        return len(instance.fetch_materializations(VIEW, limit=100).records)

    def build(instance) -> None:
        """A build launched by hand: the sensor asks for none once the lake is built."""
        if not instance.get_run_records(RunsFilter(job_name="warehouse_job", statuses=[
                DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED])):
            subprocess.run([str(Path(sys.executable).with_name("dagster")), "job", "launch",
                            "-j", "warehouse_job", "-w", str(REPO / "workspace.yaml")],
                           cwd=home, env=env, check=True, capture_output=True)

    with DagsterInstance.from_config(str(dagster_home)) as instance:
        storage = instance.event_log_storage
        try:
            # the sensor's first build ("never built"), frozen while its step holds the slot,
            # then SIGKILLed; if a build slips through, another is launched by hand
            killed, deadline = None, time.monotonic() + 150
            while killed is None:
                assert daemon.poll() is None and time.monotonic() < deadline, daemon_log()
                holders = storage.get_concurrency_info("duckdb").active_run_ids
                pid = pid_of(instance, next(iter(holders))) if holders else None
                if pid is None:
                    if builds(instance):
                        build(instance)
                    time.sleep(0.05)
                    continue
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:  # its run just ended
                    continue
                try:
                    held = storage.get_concurrency_info("duckdb").active_run_ids == holders
                except Exception as exc:
                    # stopped inside SQLite with one of its locks held, our read of the same
                    # storage gives up ("locking protocol" with the WAL's, "database is
                    # locked" with the writer's): let it go on and try again
                    if "locking protocol" not in str(exc) and "database is locked" not in str(exc):
                        raise
                    held = False
                if held:
                    os.kill(pid, signal.SIGKILL)
                    killed = next(iter(holders))
                else:
                    os.kill(pid, signal.SIGCONT)
            # the code server marks the run failed, monitoring frees its slot, and the next
            # build (the sensor's while the warehouse was never built) gets it and lands
            before = builds(instance)
            if before:
                build(instance)
            deadline = time.monotonic() + 120
            while builds(instance) == before:
                assert daemon.poll() is None, daemon_log()
                assert time.monotonic() < deadline, (
                    f"no build after the killed one: the duckdb slot is held by "
                    f"{storage.get_concurrency_info('duckdb').active_run_ids}\n{daemon_log()}")
                time.sleep(1)
        finally:
            stop_process(daemon, timeout_s=30)
            log.close()
        assert instance.get_run_by_id(killed).status == DagsterRunStatus.FAILURE
        assert storage.get_concurrency_info("duckdb").active_run_ids == set()
