"""The `alerts` sensor: each incident brings one message to a real HTTP sink on loopback when it
opens and one when it clears, over a real inbox and a real Dagster instance. A scene (an old
callback, a stale landing) is set in the inbox's own tables; nothing is mocked. Every
message is scanned for record ids and the webhook's secret."""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pytest

from pipeline import alerts as alerting
from pipeline.alerts import alerts
from pipeline.local import CURSOR_KEY
from resources.config import Alerting
from resources.inbox import FAILED, HELD, LANDED_OK, LandingState, open_inbox
from resources.inbox.resource import InboxResource
from tests.conftest import callback, connected

SECRET = "T000/B000/xoxb-secret-part"


class Sink:
    """An incoming webhook on loopback: keeps each body it is posted; answers `fail` with
    500 while it has failures to give."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.fail = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if sink.fail:
                    sink.fail -= 1
                    self.send_response(500)
                else:
                    sink.bodies.append(json.loads(raw))
                    self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/{SECRET}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def texts(self) -> list[str]:
        return [b["text"] for b in self.bodies]


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.server.shutdown()
    s.server.server_close()


@pytest.fixture
def scene(tmp_path, sink):
    """An inbox with two connected records, a Dagster instance, and the alerts' settings."""
    records = ["rec_alpha_0001", "rec_bravo_0002"]
    path = connected(tmp_path / "inbox.sqlite3", records)
    with open_inbox(path) as db:
        db.numbers(records, create=True)
    # as pipeline/definitions.py reads them from the environment, and hands them to the sensor
    settings = Alerting.from_env({"LEDGERLAKE_ALERT_URL": sink.url,
                                  "LEDGERLAKE_DAGSTER_URL": "http://dagster.example:3000"})
    # in memory: what the sensor reads (runs, cursors) is the same as on disk, and it takes
    # a tenth of the time to make
    with dg.DagsterInstance.ephemeral() as instance:
        yield Scene(path, records, instance, sink, settings)


class Scene:
    def __init__(self, path, records, instance, sink, settings: Alerting) -> None:
        self.path, self.records, self.instance, self.sink = path, records, instance, sink
        self.settings = settings  # each tick's sensor is built with these
        self.cursor: str | None = None
        self.read_all()

    def tick(self) -> dg.SensorResult:
        with dg.build_sensor_context(instance=self.instance, cursor=self.cursor,
                                     resources={"inbox": InboxResource(path=self.path)}) as ctx:
            result = alerts(self.settings)(ctx)
        self.cursor = result.cursor
        return result

    def read_all(self) -> None:
        """The inbox sensor has read every event."""
        with open_inbox(self.path) as db:
            last = db.vitals(0).last_event
        self.instance.run_storage.set_cursor_values({CURSOR_KEY: str(last)})

    def age_callbacks(self, seconds: float) -> None:
        con = sqlite3.connect(self.path)
        con.execute("update events set received_at = received_at - ?", (seconds,))
        con.commit()
        con.close()

    def land(self, product: str, outcome: str, at: float | None = None, run_id="run-1",
             record: int = 0) -> None:
        with open_inbox(self.path) as db:
            db.save_landings([LandingState(self.records[record], product, outcome, run_id,
                                           time.time() if at is None else at)])


def no_secrets(scene: Scene) -> None:
    shown = json.dumps(scene.sink.bodies)
    for record in scene.records:
        assert record not in shown
    assert SECRET not in shown and "cust1" not in shown


def test_nothing_wrong_sends_nothing(scene):
    result = scene.tick()
    assert result.skip_reason.skip_message == "open incidents: none"
    assert scene.sink.bodies == []


def test_quiet_callbacks_raise_one_alert_and_one_resolution(scene):
    scene.age_callbacks(2 * 86400)
    scene.tick()
    scene.tick()  # still quiet: no second alert
    (text,) = scene.sink.texts()
    assert text.startswith("ledgerlake alert: No callback stored for 48.0 hours while 2 "
                           "records are connected")
    with open_inbox(scene.path) as db:
        db.add(callback(scene.records[0], "BALANCE", "BALANCE_SUCCESS", account="acc1"))
    scene.read_all()
    scene.tick()
    scene.tick()
    assert scene.sink.texts()[1:] == ["ledgerlake resolved: callbacks quiet (open under a minute)"]
    assert all(set(b) == {"text"} for b in scene.sink.bodies)  # Slack's incoming webhook
    no_secrets(scene)


def test_a_stale_record_raises_its_alert_by_number(scene):
    scene.land("balances", LANDED_OK, at=time.time() - 30 * 3600, record=1)
    scene.land("balances", LANDED_OK, record=0)
    scene.tick()
    (text,) = scene.sink.texts()
    assert "1 of 2 connected records' balances not landed in 26 hours (#2)" in text
    scene.land("balances", LANDED_OK, record=1)
    scene.tick()
    assert scene.sink.texts()[1] == "ledgerlake resolved: balances stale (open under a minute)"
    no_secrets(scene)


def test_failed_and_held_records_are_told_with_their_run(scene):
    scene.land("transactions", FAILED, run_id="run-7", record=1)
    scene.land("income", HELD, run_id="run-8", record=0)
    scene.tick()
    texts = sorted(scene.sink.texts())
    assert texts[0].startswith("ledgerlake alert: 1 record's income held: a blocking check "
                               "failed, the previous rows stay in view (#1). Run: "
                               "http://dagster.example:3000/runs/run-8 .")
    assert texts[1].startswith("ledgerlake alert: 1 record's transactions failed after every "
                               "retry (#2). Run: http://dagster.example:3000/runs/run-7 .")
    scene.land("transactions", LANDED_OK, run_id="run-9", record=1)
    scene.tick()
    assert scene.sink.texts()[2] == \
        "ledgerlake resolved: 1 record's transactions failed (open under a minute)"
    no_secrets(scene)


@dg.op(config_schema={"fail": bool})
def sometimes(context):
    if context.op_config["fail"]:
        raise RuntimeError("broken on purpose")


@dg.job
def chores():
    sometimes()


def test_a_failed_run_opens_its_job_and_a_success_clears_it(scene):
    def run(fail: bool):
        return chores.execute_in_process(instance=scene.instance, raise_on_error=False,
                                         run_config={"ops": {"sometimes": {"config": {
                                             "fail": fail}}}})

    scene.tick()  # the runs before now were read
    failed = run(True)
    assert not failed.success
    scene.tick()
    run(True)  # the same incident: no second message
    scene.tick()
    (text,) = scene.sink.texts()
    assert text == (f"ledgerlake alert: A run of chores failed: http://dagster.example:3000/"
                    f"runs/{failed.run_id} . It clears when a run of chores succeeds.")
    assert run(False).success
    scene.tick()
    assert scene.sink.texts()[1] == "ledgerlake resolved: chores failing (open under a minute)"


def test_the_sensor_behind_and_dead_letters_growing(scene):
    scene.tick()  # the dead letters seen so far are not news
    with open_inbox(scene.path) as db:
        db.dead_letter("body is not JSON", b"{oops")
        db.add(callback(scene.records[0], "BALANCE", "BALANCE_SUCCESS", account="acc9"))
    scene.age_callbacks(3600)  # stored an hour ago, and not read since
    scene.tick()
    texts = sorted(scene.sink.texts())
    assert texts[0].startswith("ledgerlake alert: 1 callback not yet read by the inbox "
                               "sensor, the oldest stored 60 minutes ago")
    assert texts[1].startswith("ledgerlake alert: 1 new dead letter (1 in all)")
    scene.read_all()
    scene.tick()
    assert scene.sink.texts()[2] == \
        "ledgerlake resolved: the inbox sensor behind (open under a minute)"
    # an hour without a new dead letter clears that one
    now = time.time() + 3700
    scene.cursor, _ = alerting.evaluate(scene.instance, InboxResource(path=scene.path),
                                        scene.settings, scene.cursor, now=now)
    assert scene.sink.texts()[3] == "ledgerlake resolved: dead letters growing (open 62 minutes)"


def test_a_receiver_whose_health_fails(scene, receiver):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    scene.settings = replace(scene.settings, receiver_url=closed)
    scene.tick()
    (text,) = scene.sink.texts()
    assert text.startswith("ledgerlake alert: The receiver's /health fails: it does not answer")
    scene.settings = replace(scene.settings, receiver_url=receiver.url)  # one answering 200
    scene.tick()
    assert scene.sink.texts()[1] == "ledgerlake resolved: receiver unhealthy (open under a minute)"


def test_a_failed_delivery_is_logged_and_tried_again(scene, caplog):
    scene.sink.fail = 1
    scene.age_callbacks(2 * 86400)
    result = scene.tick()  # never raises: the sensor starts no run to fail
    assert scene.sink.bodies == []
    assert "not delivered: HTTP 500" in result.skip_reason.skip_message or any(
        "not delivered to http://127.0.0.1" in r.getMessage() for r in caplog.records)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    scene.tick()
    scene.tick()
    assert len(scene.sink.texts()) == 1  # delivered once, on the next tick


def test_messages_past_the_hours_allowance_wait_their_turn(scene):
    scene.settings = replace(scene.settings, max_per_hour=1, format="json")
    scene.land("transactions", FAILED, run_id="run-7", record=1)
    scene.age_callbacks(2 * 86400)
    scene.tick()
    scene.tick()
    (first,) = scene.sink.bodies
    assert first["state"] == "firing" and first["incident"] in ("quiet", "failed:transactions")
    assert first["text"].startswith("ledgerlake alert: ")
    scene.cursor, _ = alerting.evaluate(scene.instance, InboxResource(path=scene.path),
                                        scene.settings, scene.cursor, now=time.time() + 3601)
    assert len(scene.sink.bodies) == 2
    assert {b["incident"] for b in scene.sink.bodies} == {"quiet", "failed:transactions"}
    no_secrets(scene)


def test_an_incident_that_clears_before_its_message_went_sends_neither(scene, monkeypatch):
    scene.sink.fail = 1
    scene.age_callbacks(2 * 86400)
    scene.tick()  # the alert could not be delivered
    with open_inbox(scene.path) as db:
        db.add(callback(scene.records[0], "BALANCE", "BALANCE_SUCCESS", account="acc1"))
    scene.read_all()
    scene.tick()
    assert scene.sink.bodies == []


@pytest.mark.slow  # two runs with the engine's retries, each its own process: make test-all
def test_a_product_failing_past_its_retries_alerts_once_and_resolves_once(
        sandbox, sink, tmp_path, monkeypatch):
    """The sandbox fails a record's transactions four times: the run (a real `ledgerlake
    rerun` process, on a Dagster instance on disk) fails after its three retries, and
    exactly one alert arrives; once the product lands, exactly one resolution."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((repo / "dagster.yaml").read_text())
    env = {"DAGSTER_HOME": str(dagster_home), "LEDGERLAKE_HOME": str(tmp_path),
           "LEDGERLAKE_API_URL": sandbox.url, "LEDGERLAKE_ENVIRONMENT": "sandbox",
           "LEDGERLAKE_SECRET_KEY": sandbox.sandbox_key, "LEDGERLAKE_RETRY_DELAY_S": "0.1",
           "LEDGERLAKE_ALERT_URL": sink.url, "LEDGERLAKE_DAGSTER_URL": "http://ui.example"}
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("LEDGERLAKE_INBOX", raising=False)
    made = sandbox.control("customers/create", customers=[{"accounts": 1, "months": 1,
                                                            "seed": 9}])["customers"][0]
    record = made["record"]
    sandbox.control("records/fail", record=record, product="transactions", times=4,
                    error_code="BANK_DOWN")
    connected(tmp_path / "inbox.sqlite3", [record])

    def rerun() -> int:
        return subprocess.run([sys.executable, "-m", "pipeline.cli", "rerun", record,
                               "--products", "transactions"], cwd=repo, capture_output=True,
                              text=True, timeout=300).returncode

    sensor = alerts(Alerting.from_env(env))  # the settings the definitions would read

    def tick(instance, cursor):
        with dg.build_sensor_context(instance=instance, cursor=cursor,
                                     resources={"inbox": InboxResource()}) as ctx:
            return sensor(ctx).cursor

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        cursor = tick(instance, None)
        assert rerun() == 1  # failed after four tries
        cursor = tick(instance, tick(instance, cursor))
        (alert,) = sink.texts()
        (run,) = instance.get_run_records(dg.RunsFilter(statuses=[
            dg.DagsterRunStatus.FAILURE]))
        assert alert.startswith("ledgerlake alert: 1 record's transactions failed after every "
                                f"retry (#1). Run: http://ui.example/runs/{run.dagster_run.run_id}")
        assert rerun() == 0  # the bank is back: it lands
        tick(instance, tick(instance, cursor))
    (resolved,) = sink.texts()[1:]
    assert re.fullmatch(r"ledgerlake resolved: 1 record's transactions failed \(open (under a "
                        r"minute|\d+ minutes?)\)", resolved)
    shown = json.dumps(sink.bodies)
    assert record not in shown and made.get("customer", "?") not in shown
    assert SECRET not in shown
