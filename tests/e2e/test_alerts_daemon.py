"""Alerts as an operator gets them: dagster-daemon evaluates the `alerts` sensor beside the
inbox sensor, with the sandbox and the receiver as real processes and an HTTP sink as the
webhook. The sandbox fails a record's transactions past every retry: exactly one alert
arrives; once they land, exactly one "resolved". Neither names a record id or a personal
value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import demo
from pipeline.local import stop_process
from tests.ground_truth import wait
from tests.pipeline.test_alerts import SECRET, Sink

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.server.shutdown()
    s.server.server_close()


@pytest.mark.slow
def test_the_daemon_alerts_once_and_resolves_once(tmp_path, sandbox, receiver, sink):
    home = tmp_path / "home"
    dagster_home = demo.dagster_home(home)  # as `ledgerlake dev` makes it
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "LEDGERLAKE_HOME": str(home),
           "LEDGERLAKE_INBOX": str(receiver.inbox), "LEDGERLAKE_API_URL": sandbox.url,
           "LEDGERLAKE_ENVIRONMENT": "sandbox", "LEDGERLAKE_SECRET_KEY": sandbox.sandbox_key,
           "LEDGERLAKE_RETRY_DELAY_S": "0.2", "LEDGERLAKE_ALERT_URL": sink.url,
           "LEDGERLAKE_ALERT_FORMAT": "json", "LEDGERLAKE_RECEIVER_URL": receiver.url}
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
    made = sandbox.control("customers/create", customers=[{"accounts": 1, "months": 1,
                                                           "seed": 11}])["customers"][0]
    record = made["record"]
    # a bank down: the client does not retry BANK_DOWN, the engine tries the step 4 times
    sandbox.control("records/fail", record=record, product="transactions", times=4,
                    error_code="BANK_DOWN")

    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115
    daemon = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
         str(REPO / "workspace.yaml")], cwd=home, env=env, stdout=log, stderr=log)

    def told(state: str) -> list[dict]:
        return [b for b in sink.bodies if b["state"] == state]

    try:
        wait("the alert", lambda: told("firing"), 300, daemon)
        # the product lands once the bank is back: the failed record run again
        rerun = subprocess.run([sys.executable, "-m", "pipeline.cli", "rerun", "--failed"],
                               cwd=home, env=env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr + rerun.stdout
        wait("the resolution", lambda: told("resolved"), 180, daemon)
    finally:
        stop_process(daemon, timeout_s=30)
        log.close()

    (alert,) = told("firing")
    (resolved,) = told("resolved")
    assert alert["incident"] == resolved["incident"] == "failed:transactions"
    assert alert["text"].startswith("ledgerlake alert: 1 record's transactions failed after "
                                    "every retry (#1). Run: http://127.0.0.1:3000/runs/")
    assert resolved["text"].startswith("ledgerlake resolved: 1 record's transactions failed")
    assert len(sink.bodies) == 2
    shown = json.dumps(sink.bodies)
    assert record not in shown and SECRET not in shown
    for member in ("customer", "name", "email", "bvn"):
        value = made.get(member)
        assert not isinstance(value, str) or value not in shown
