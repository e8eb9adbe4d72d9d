"""`ledgerlake metrics` as a real process over a real inbox and Dagster instance, scraped over
HTTP and read with prometheus_client's own parser: its numbers are the scene's."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.local import CURSOR_KEY, Server
from resources.inbox import FAILED, HELD, LANDED_OK, LandingState, open_inbox
from tests.conftest import callback, connected, disconnect

REPO = Path(__file__).resolve().parents[2]


def scrape(url: str) -> tuple[dict, str]:
    resp = httpx.get(url + "/metrics", timeout=30)
    assert resp.status_code == 200, resp.text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(resp.text) for s in family.samples}
    return samples, resp.text


@pytest.fixture
def home(tmp_path):
    from dagster import DagsterInstance

    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.run_storage.set_cursor_values({CURSOR_KEY: "3"})  # the sensor read 3 events
    return tmp_path


def test_the_pipelines_state_in_prometheus_text(home, receiver):
    records = ["rec_metrics_001", "rec_metrics_002", "rec_metrics_003"]
    inbox = home / "inbox.sqlite3"
    connected(inbox, records)  # events 1 to 3, read by the sensor
    now = time.time()
    with open_inbox(inbox) as db:
        db.add(callback(records[0], "BALANCE", "BALANCE_SUCCESS", account="acc1"))  # event 4
        db.add(disconnect("cust1", "2026-02-01T00:00:00.000Z"))  # event 5, all of cust1
        db.add(callback("rec_metrics_004", "AUTH", "AUTH_SUCCESS", customer="cust2"))
        db.dead_letter("body is not JSON", b"{")
        db.save_landings([
            LandingState("rec_metrics_004", "balances", LANDED_OK, "run-1", now - 3600),
            LandingState(records[0], "transactions", FAILED, "run-2", now),
            LandingState(records[1], "income", HELD, "run-2", now)])
    env = {**os.environ, "LEDGERLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
           "LEDGERLAKE_RECEIVER_URL": receiver.url}
    env.pop("LEDGERLAKE_INBOX", None)
    with Server("metrics", env=env, log_path=home / "metrics.log") as server:
        samples, text = scrape(server.url)

    def value(name: str, **labels) -> float:
        return samples[(f"ledgerlake_{name}", tuple(sorted(labels.items())))]

    assert value("inbox_up") == 1
    assert value("callbacks_waiting") == 3  # events 4, 5 and 6
    assert 0 <= value("callbacks_waiting_oldest_age_seconds") < 3600
    assert value("inbox_events") == 6
    assert value("dead_letters") == 1
    assert value("records", status="connected") == 1
    assert value("records", status="disconnected") == 3
    assert value("records", status="reauth_required") == 0
    assert value("records_not_landed", product="transactions", outcome="failed") == 1
    assert value("records_not_landed", product="income", outcome="held") == 1
    assert value("records_not_landed", product="balances", outcome="failed") == 0
    assert value("records_landed", product="balances") == 1
    assert 3600 <= value("landing_age_max_seconds", product="balances") < 7200
    assert value("landing_age_median_seconds", product="balances") == \
        value("landing_age_max_seconds", product="balances")
    assert ("ledgerlake_landing_age_max_seconds", (("product", "income"),)) not in samples
    assert value("daily_refresh_last_success_timestamp_seconds") == 0
    assert value("warehouse_last_build_timestamp_seconds") == 0
    assert value("receiver_healthy") == 1
    for record in [*records, "rec_metrics_004", "cust1"]:
        assert record not in text
