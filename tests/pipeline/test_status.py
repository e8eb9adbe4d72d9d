"""`ledgerlake status` and `ledgerlake rerun`, as a data engineer runs them: real processes on
a real inbox (each record's landing state) and Dagster instance (the reruns), against a
sandbox that fails a record's fetch past every retry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resources.lake import Lake
from tests.conftest import connected

REPO = Path(__file__).resolve().parents[2]


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def home(tmp_path, sandbox):
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "LEDGERLAKE_HOME": str(tmp_path),
           "LEDGERLAKE_API_URL": sandbox.url, "LEDGERLAKE_ENVIRONMENT": "sandbox",
           "LEDGERLAKE_SECRET_KEY": sandbox.sandbox_key, "LEDGERLAKE_RETRY_DELAY_S": "0.1"}
    env.pop("LEDGERLAKE_INBOX", None)
    connected(tmp_path / "inbox.sqlite3", [])  # the inbox, as the receiver makes it
    return env


@pytest.mark.slow  # tens of seconds: make test-all
def test_a_record_that_failed_every_retry_is_listed_and_rerun(sandbox, home, tmp_path):
    with sandbox.api() as api:
        made = api.post("sandbox/customers/create",
                        json={"customers": [{"accounts": 1, "months": 1, "seed": 9}]})
        record = made.json()["data"]["customers"][0]["record"]
        time.sleep(0.5)
        # a bank down answers 400 BANK_DOWN: the client does not retry it, the engine does,
        # four tries of the step (three retries), then the record stays failed
        failing = api.post("sandbox/records/fail", json={
            "record": record, "product": "transactions", "times": 4, "error_code": "BANK_DOWN"})
        assert failing.status_code == 200, failing.text
    connected(tmp_path / "inbox.sqlite3", [record])  # its connection's callback came in

    first = cli(home, "rerun", record, "--products", "transactions")
    assert first.returncode == 1, first.stderr
    assert "1 record(s): transactions: failed" in first.stdout

    listed = cli(home, "status", "--failed", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["record"] == record and row["products"]["transactions"] == "failed"
    failed = row["landings"]["transactions"]
    assert failed["outcome"] == "failed" and "BANK_DOWN" in failed["error"]
    assert failed["last_landed_at"] is None  # nothing of it was ever published
    table = cli(home, "status")
    assert record in table.stdout and "failed" in table.stdout
    assert "1 record; 1 with a failed or held product" in table.stderr
    told = cli(home, "status", record)  # one record: told in full, with why
    assert f"record {record}: connected" in told.stdout
    (line,) = [ln for ln in told.stdout.splitlines() if ln.strip().startswith("transactions")]
    assert "failed" in line and f"run {failed['run_id']}" in line and "BANK_DOWN" in line

    again = cli(home, "rerun", "--failed")  # no new callback: the same record, once more
    assert again.returncode == 0, again.stderr + again.stdout
    assert "1 record(s): transactions: landed" in again.stdout
    assert json.loads(cli(home, "status", "--failed", "--json").stdout) == []
    (row,) = json.loads(cli(home, "status", record, "--json").stdout)
    landed = row["landings"]["transactions"]
    assert row["products"]["transactions"] == "landed" and landed["rows"] > 0
    assert landed["run_id"] != failed["run_id"]
    lake = Lake(root=str(tmp_path / "lake"))
    assert lake.read("transactions", record).num_rows == landed["rows"]
    # the lake keeps each try: four failed in the first run, then the landing of the second
    tries = lake.read("landings", record).sort_by("landed_at").to_pylist()
    assert [(t["run_id"], t["outcome"]) for t in tries] == \
        [(failed["run_id"], "failed")] * 4 + [(landed["run_id"], "landed")]


def test_status_lists_the_first_records_unless_all(home, tmp_path, make):
    """`status` needs only the inbox: the first LISTED records, or every one with --all."""
    from pipeline.status import LISTED
    from resources.inbox import Inbox, describe, kept_body

    records = [f"r{i:05d}" for i in range(LISTED + 1)]
    with Inbox(tmp_path / "inbox.sqlite3") as inbox:
        inbox.add_described([(describe(b), kept_body(b)) for b in (
            make.callback(r, "ACCOUNTS", "ACCOUNTS_SUCCESS") for r in records)])
    env = {k: v for k, v in home.items() if k != "DAGSTER_HOME"}
    shown = cli(env, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert [r["record"] for r in rows] == records[:LISTED]
    assert {r["products"]["accounts"] for r in rows} == {"waiting"}  # called back, not landed
    every = json.loads(cli(env, "status", "--all", "--json").stdout)
    assert [r["record"] for r in every] == records


def test_one_record_told_in_full_names_its_number_and_its_checks(home, tmp_path):
    """`status '#N'`: the record by its number, told with its id, and a line of checks: each
    check's verdict on its product's latest landing."""
    from resources.inbox import HELD, LANDED_OK, LandingState, open_inbox

    now = time.time()
    with open_inbox(connected(tmp_path / "inbox.sqlite3", ["rec1"])) as inbox:
        inbox.save_landings([
            LandingState("rec1", "transactions", LANDED_OK, "run-2", now, row_count=60,
                         detail={"checks": {"running_balance_reconciles": 0}}),
            LandingState("rec1", "income", HELD, "run-2", now,
                         detail={"checks": {"income_matches_transactions": 2}})])
        number = inbox.numbers(["rec1"])["rec1"]
    env = {k: v for k, v in home.items() if k != "DAGSTER_HOME"}
    told = cli(env, "status", f"#{number}")
    assert told.returncode == 0, told.stderr
    assert f"record rec1: connected (number #{number})" in told.stdout
    (checks,) = [ln for ln in told.stdout.splitlines() if ln.startswith("  checks: ")]
    assert checks == ("  checks: running_balance_reconciles passed (transactions); "
                      "income_matches_transactions failed (2 problems) (income)"), checks
    assert "1 record; 1 with a failed or held product" in told.stderr


@pytest.mark.parametrize("args,message", [
    (["status", "../etc"], "a record id matches"),
    (["status", "nosuchrecord"], "the inbox has no record nosuchrecord"),
    (["rerun"], "name the records to run again, or --failed"),
    (["rerun", "r1", "--products", "transactions,money"], "products are accounts"),
])
def test_bad_arguments_get_one_clear_line(home, args, message):
    out = cli(home, *args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
