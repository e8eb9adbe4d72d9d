"""`ledgerlake status` and `ledgerlake rerun`, as a data engineer runs them: real processes on
a real Dagster instance, against a sandbox that fails a record's fetch past every retry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resources.lake import Lake

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
    return env


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

    from dagster import DagsterInstance

    os.environ["DAGSTER_HOME"] = home["DAGSTER_HOME"]
    try:
        with DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("records", [record])
    finally:
        del os.environ["DAGSTER_HOME"]

    first = cli(home, "rerun", record, "--products", "transactions")
    assert first.returncode == 1, first.stderr
    assert f"record {record}: transactions: failed" in first.stdout

    listed = cli(home, "status", "--failed", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["record"] == record and row["products"]["transactions"] == "failed"
    table = cli(home, "status")
    assert record in table.stdout and "failed" in table.stdout
    assert "1 with a failed or held product" in table.stderr

    again = cli(home, "rerun", "--failed")  # no new callback: the same record, once more
    assert again.returncode == 0, again.stderr + again.stdout
    assert f"record {record}: transactions: landed" in again.stdout
    assert json.loads(cli(home, "status", "--failed", "--json").stdout) == []
    assert Lake(root=str(tmp_path / "lake")).read("transactions", record).num_rows > 0


@pytest.mark.parametrize("args,message", [
    (["status", "../etc"], "a record id matches"),
    (["status", "nosuchrecord"], "not a record partition: nosuchrecord"),
    (["rerun"], "name the records to run again, or --failed"),
    (["rerun", "r1", "--products", "transactions,money"], "products are accounts"),
])
def test_bad_arguments_get_one_clear_line(home, args, message):
    out = cli(home, *args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
