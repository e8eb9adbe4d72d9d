"""The thin slice over real HTTP: sandbox -> callback -> receiver -> sensor -> Parquet -> SQL."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from dagster import DagsterInstance

from pipeline.demo import wait_for_events
from pipeline.local import tick
from resources.inbox import Inbox
from resources.lake import Lake


@pytest.fixture
def pipeline_env(tmp_path, sandbox, receiver, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("LEDGERLAKE_HOME", str(home))
    monkeypatch.setenv("LEDGERLAKE_INBOX", str(receiver.inbox))
    monkeypatch.setenv("LEDGERLAKE_API_URL", sandbox.url)
    monkeypatch.setenv("LEDGERLAKE_ENVIRONMENT", "sandbox")
    monkeypatch.setenv("LEDGERLAKE_SECRET_KEY", sandbox.sandbox_key)
    with sandbox.api() as api:
        api.post("settings/webhook", json={"url": receiver.callback_url,
                                           "token": receiver.token}).raise_for_status()
    return home


def load_defs():
    """Definitions read their settings at import: load them fresh under this test's env."""
    for name in [m for m in sys.modules if m.startswith("pipeline.definitions")]:
        del sys.modules[name]
    from pipeline.definitions import defs

    return defs


@pytest.mark.slow
def test_callback_to_sql(pipeline_env, sandbox, receiver, tmp_path):
    with sandbox.api() as api:
        made = api.post("sandbox/customers/create",
                        json={"customers": [{"accounts": 2, "products": ["accounts"]},
                                            {"accounts": 3, "products": ["accounts"]}]})
        assert made.status_code == 200, made.text
        created = made.json()["data"]["customers"]
    records = {c["record"]: c["accounts"] for c in created}

    assert wait_for_events(receiver.inbox, len(records), timeout_s=30) == len(records)
    inbox = Inbox(receiver.inbox)
    events = inbox.after(0)
    inbox.close()
    assert {e.record for e in events} == set(records)
    assert {(e.method, e.code) for e in events} == {("ACCOUNTS", "ACCOUNTS_SUCCESS")}

    defs = load_defs()
    with DagsterInstance.ephemeral() as instance:
        run_ids = tick(defs, instance)
        assert len(run_ids) == 1  # two new records side by side share one run
        assert all(instance.get_run_by_id(r).is_success for r in run_ids)
        assert set(instance.get_dynamic_partitions("records")) == set(records)
        # a second tick finds nothing new: the cursor moved and run keys are spent
        assert tick(defs, instance) == []
        out = defs.resolve_job_def("warehouse_job").execute_in_process(instance=instance)
        assert out.success

    lake = Lake(root=str(pipeline_env / "lake"))
    for record, account_ids in records.items():
        table = lake.read("accounts", record)
        assert sorted(table.column("account_id").to_pylist()) == sorted(account_ids)
        assert all(len(n) == 10 and n.isdigit() for n in table.column("nuban").to_pylist())

    answer = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sql",
         "select count(*) as n, count(distinct record_id) as r from accounts"],
        capture_output=True, text=True, env={**os.environ}, check=True)
    row = [ln for ln in answer.stdout.splitlines() if re.search(r"\d", ln) and "int" not in ln]
    assert re.findall(r"\d+", row[-1]) == ["5", "2"], answer.stdout
