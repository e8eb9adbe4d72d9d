"""deploy/dagster.yaml, the production profile: Dagster's instance on a real Postgres, the
service's pool shared by every run through it, and a Postgres that is not there said in one
line without its password."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
import yaml

from assets.accounts import accounts
from assets.batch import Batch, batch_config
from assets.publish import SERVICE_POOL
from resources.client.resource import ConnectionClient
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from tests.conftest import connected, land, noted, numbers
from tests.postgres import free_port, pg_env
from tests.resources.sandboxes import client_for, make_customers, sandbox_with

REPO = Path(__file__).resolve().parents[1]
PRODUCTION = REPO / "deploy" / "dagster.yaml"


@pytest.fixture
def production(postgres_url, tmp_path, monkeypatch) -> Path:
    """A DAGSTER_HOME holding the production profile, its variables naming a fresh database."""
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copyfile(PRODUCTION, home / "dagster.yaml")
    for name, value in pg_env(postgres_url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def tables(url: str) -> set[str]:
    with psycopg2.connect(url) as con, con.cursor() as cur:
        cur.execute("select tablename from pg_tables where schemaname = 'public'")
        return {r[0] for r in cur.fetchall()}


def test_it_differs_from_the_embedded_default_only_in_storage_and_how_runs_start():
    default = yaml.safe_load((REPO / "dagster.yaml").read_text())
    production = yaml.safe_load(PRODUCTION.read_text())
    assert set(production) - set(default) == {"storage", "run_launcher"}
    for key in set(default) - {"run_coordinator"}:  # telemetry, pools, logs, retries...
        assert production[key] == default[key], key
    # the queue: production dequeues more often; both queue again a run whose code location
    # could not load
    coordinators = [p["run_coordinator"] for p in (default, production)]
    assert {c["class"] for c in coordinators} == {"QueuedRunCoordinator"}
    assert [{k: v for k, v in c["config"].items() if k != "dequeue_interval_seconds"}
            for c in coordinators] == [default["run_coordinator"]["config"]] * 2
    db = production["storage"]["postgres"]["postgres_db"]
    assert {k: v.get("env") for k, v in db.items() if isinstance(v, dict)} == {
        "hostname": "DAGSTER_PG_HOST", "port": "DAGSTER_PG_PORT",
        "username": "DAGSTER_PG_USER", "password": "DAGSTER_PG_PASSWORD",
        "db_name": "DAGSTER_PG_DB"}


@dg.asset(pool=SERVICE_POOL)
def tiny(batch: Batch) -> int:
    return len(batch.records)


READ_BACK = """
import json, dagster as dg
from dagster._core.events import DagsterEventType
with dg.DagsterInstance.get() as instance:
    run = instance.get_run_by_id({run_id!r})
    mats = instance.fetch_materializations(dg.AssetKey("tiny"), limit=10).records
    print(json.dumps({{
        "status": run.status.value,
        "materializations": [m.run_id for m in mats],
        "records": run.run_config["resources"]["batch"]["config"]["records"],
        "tags": {{k: v for k, v in run.tags.items() if k.startswith("ledgerlake/")}},
        "ticks": len(instance.get_ticks("ledgerlake-test", "selector")),
        "launcher": type(instance.run_launcher).__name__,
        "storage": type(instance.run_storage).__name__,
    }}))
"""


def test_runs_event_logs_and_schedules_live_in_postgres(production, postgres_url):
    from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus

    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 4
        assert instance.run_monitoring_enabled and instance.run_retries_max_retries == 2
        # a run's batch is its config, kept with the run (no partitions)
        result = dg.materialize([tiny], instance=instance, resources={"batch": Batch.configure_at_launch()},
                                run_config=batch_config([1, 2]),
                                tags={"ledgerlake/records": "2"})
        instance.create_tick(TickData(
            instigator_origin_id="ledgerlake-test", instigator_name="daily_refresh",
            instigator_type=InstigatorType.SCHEDULE, status=TickStatus.SUCCESS,
            timestamp=time.time(), selector_id="selector", run_ids=[result.run_id]))
    assert result.success

    # a second process, sharing nothing with this one but the database, reads it all back
    out = subprocess.run([sys.executable, "-c", READ_BACK.format(run_id=result.run_id)],
                         capture_output=True, text=True, cwd=REPO, env=dict(os.environ),
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"status": "SUCCESS", "materializations": [result.run_id],
                    # the run tags itself as it starts (who launched it) in the same store
                    "records": [1, 2], "tags": {"ledgerlake/records": "2",
                                                "ledgerlake/launched": "manual"},
                    "ticks": 1, "launcher": "DefaultRunLauncher",
                    "storage": "PostgresRunStorage"}
    assert result.output_for_node("tiny") == 2  # the run got its batch

    assert {"runs", "event_logs", "job_ticks", "instigators",
            "concurrency_limits"} <= tables(postgres_url)
    with psycopg2.connect(postgres_url) as con, con.cursor() as cur:
        cur.execute("select run_id from runs")
        assert cur.fetchall() == [(result.run_id,)]
        cur.execute("select count(*) from event_logs where run_id = %s", (result.run_id,))
        assert cur.fetchone()[0] > 0
    assert not list(production.rglob("*.db"))  # no SQLite of Dagster's beside the yaml


def _events(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.dagster_event.event_type_value if e.dagster_event else "" for e in
            instance.all_logs(run_id)]


def test_a_fetching_step_waits_for_a_slot_of_the_service_pool_held_by_another_run(
        production, sandbox):
    """The pool's slots are rows in Postgres: a slot held by another run (any process, any
    machine) keeps the step from starting, and it starts as soon as the slot is freed."""
    with client_for(sandbox) as control:
        (one,) = make_customers(control, {"accounts": 1, "months": 1})
    record = one["record"]
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots(SERVICE_POOL, 1)  # what an operator sets by hand
        assert storage.claim_concurrency_slot(SERVICE_POOL, "another-run", "accounts").is_claimed
        client = ConnectionClient(base_url=sandbox.url, secret_key=sandbox.sandbox_key,
                                  environment="sandbox")
        inbox = InboxResource(path=connected(production / "inbox.sqlite3", [record]))
        results: list = []
        run = threading.Thread(target=lambda: results.append(land(
            [accounts], [record], {"client": client, "inbox": inbox,
                                   "lake": Lake(root=str(production / "lake"))},
            instance=instance)))
        run.start()
        try:
            blocked_run = None
            deadline = time.monotonic() + 120
            while blocked_run is None and time.monotonic() < deadline:
                for r in instance.get_runs():
                    messages = [e.user_message for e in instance.all_logs(r.run_id)]
                    if f"Step blocked by limit for pool {SERVICE_POOL}" in messages:
                        blocked_run = r.run_id
                time.sleep(0.2)
            assert blocked_run, "the step never said it waits for the pool"
            assert "STEP_START" not in _events(instance, blocked_run)  # it really waits
        finally:
            storage.free_concurrency_slots_for_run("another-run")
            run.join(180)
        assert results and results[0].success
        events = _events(instance, blocked_run)
        assert "STEP_START" in events and "ASSET_MATERIALIZATION" in events
    assert [(r["record_id"], r["outcome"]) for r in noted(production / "lake", "landings",
                                                          blocked_run)] == [(record, "landed")]


ONE_RUN = """
import json, os, sys, time
import dagster as dg
from assets.accounts import accounts
from assets.batch import Batch
from resources.client.resource import ConnectionClient
from resources.inbox.resource import InboxResource
from resources.lake import Lake
client = ConnectionClient(base_url=os.environ["T_URL"], secret_key=os.environ["T_KEY"],
                          environment="sandbox", max_attempts=1)
with dg.DagsterInstance.get() as instance:
    # every run ready before any calls: started seconds apart on a busy machine, no two
    # calls would fall in one interval of the limit
    ready = os.path.join(os.environ["T_READY"], sys.argv[1])
    open(ready, "w").close()
    deadline = time.monotonic() + 120  # a run that died unready: the others go all the same
    while len(os.listdir(os.environ["T_READY"])) < int(os.environ["T_RUNS"]) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    out = dg.materialize([accounts], instance=instance, raise_on_error=False, resources={
        "client": client, "lake": Lake(root=os.environ["T_LAKE"]),
        "inbox": InboxResource(path=os.environ["T_INBOX"]),
        "batch": Batch(records=[int(n) for n in sys.argv[1:]])})
print(json.dumps({"run_id": out.run_id, "success": out.success}))
"""


@pytest.mark.slow
def test_a_429_storm_across_runs_slows_them_down_and_fails_none(production, tmp_path):
    """Four runs at once, each its own process, against a service that allows one call every
    four seconds per endpoint: most calls are told to wait (429 with Retry-After), and every
    run still succeeds. Their clients get a single try each, so a 429 that counted as a
    failed try would fail the run."""
    with sandbox_with(tmp_path, "--rate-limit", "0.25") as box:
        with client_for(box) as control:
            made = [make_customers(control, {"accounts": 1, "months": 1})[0]["record"]
                    for _ in range(4)]
        with dg.DagsterInstance.get() as instance:
            instance.event_log_storage.set_concurrency_slots(SERVICE_POOL, 4)
        env = {**os.environ, "T_URL": box.url, "T_KEY": box.sandbox_key,
               "T_LAKE": str(tmp_path / "lake"),
               "T_INBOX": connected(tmp_path / "inbox.sqlite3", made),
               "T_READY": str(tmp_path / "ready"), "T_RUNS": str(len(made))}
        (tmp_path / "ready").mkdir()
        runs = [subprocess.Popen([sys.executable, "-c", ONE_RUN, str(number)], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for number in numbers(InboxResource(path=env["T_INBOX"]), made)]
        outs = [p.communicate(timeout=280) for p in runs]
    results = []
    for p, (out, err) in zip(runs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["success"] for r in results] == [True] * 4
    with dg.DagsterInstance.get() as instance:  # the runs' own logs, read back from Postgres
        told_to_wait = [e.user_message for r in results for e in instance.all_logs(r["run_id"])
                        if "ACCOUNTS_LIMIT" in e.user_message]
    assert told_to_wait  # the storm happened, and was waited out
    assert all(m.startswith("retrying POST accounts/get") for m in told_to_wait)
    assert sorted((r["record_id"], r["outcome"]) for r in noted(tmp_path / "lake", "landings")) \
        == sorted((record, "landed") for record in made)


DOWN = "pw-" + "Zq9" * 6  # a password no message has any other reason to hold


def test_a_postgres_that_is_down_is_said_in_one_line_without_its_password(tmp_path):
    port = free_port()  # nothing listens there
    env = {**os.environ, "DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(port),
           "DAGSTER_PG_USER": "dagster", "DAGSTER_PG_PASSWORD": DOWN,
           "DAGSTER_PG_DB": "dagster"}
    out = subprocess.run([sys.executable, str(REPO / "deploy" / "entrypoint.py"),
                          sys.executable, "-c", "print('started')"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "started" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"postgresql://dagster@127.0.0.1:{port}/dagster is not reachable" in lines[0]
    assert DOWN not in out.stderr + out.stdout

    half = {k: v for k, v in env.items() if k != "DAGSTER_PG_DB"}
    out = subprocess.run([sys.executable, str(REPO / "deploy" / "entrypoint.py"), "true"],
                         capture_output=True, text=True, env=half, timeout=60)
    assert out.returncode == 2 and "set DAGSTER_PG_DB" in out.stderr
    assert DOWN not in out.stderr


def test_the_entrypoint_becomes_its_command_when_postgres_answers(postgres_url):
    env = {**os.environ, **pg_env(postgres_url)}
    out = subprocess.run([sys.executable, str(REPO / "deploy" / "entrypoint.py"),
                          sys.executable, "-c", "import os; print('started', os.getpid())"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("started"), out.stderr


def test_the_entrypoint_leaves_alone_a_process_that_uses_another_instance():
    """A receiver has no DAGSTER_PG_*; the Helm chart's pods have only DAGSTER_PG_PASSWORD
    (the chart writes its own dagster.yaml): both start without a check."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PG_")}
    for env in (bare, {**bare, "DAGSTER_PG_PASSWORD": DOWN}):
        out = subprocess.run([sys.executable, str(REPO / "deploy" / "entrypoint.py"),
                              sys.executable, "-c", "print('started')"],
                             capture_output=True, text=True, env=env, timeout=60)
        assert (out.returncode, out.stdout.strip()) == (0, "started"), out.stderr
