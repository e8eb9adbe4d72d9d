"""The thin slice over real HTTP: sandbox -> callback -> receiver -> sensor -> Parquet -> SQL."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance

from pipeline.cli.demo import wait_for_events
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
        assert len(run_ids) == 1  # two new records wanting the same product share one run
        (run,) = [instance.get_run_by_id(r) for r in run_ids]
        assert run.is_success
        with Inbox(receiver.inbox) as inbox:  # the run names its records by number
            numbered = inbox.ids_of(run.run_config["resources"]["batch"]["config"]["records"])
        assert sorted(numbered.values()) == sorted(records)
        assert not any(r in str(run.run_config) + str(run.tags) for r in records)
        # Dagster hears of the batch: one materialization, one verdict per check
        (mat,) = instance.fetch_materializations(AssetKey("accounts"), limit=10).records
        meta = mat.asset_materialization.metadata
        assert mat.run_id == run.run_id
        assert (meta["records"].value, meta["published"].value, meta["held"].value,
                meta["failed"].value, meta["dagster/row_count"].value) == (2, 2, 0, 0, 5)
        key = AssetCheckKey(AssetKey("accounts"), "account_has_record")
        check = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
        assert check.run_id == run.run_id and check.evaluation.passed
        assert check.evaluation.metadata["records_checked"].value == 2
        # a second tick finds nothing new: the cursor moved and run keys are spent
        assert tick(defs, instance) == []
        out = defs.resolve_job_def("warehouse_job").execute_in_process(instance=instance)
        assert out.success
    # each record's landing, as the inbox keeps it and as the lake's `landings` table says
    with Inbox(receiver.inbox) as inbox:
        states = inbox.landings(records, product="accounts")
    assert {(s.record, s.outcome, s.run_id, s.row_count) for s in states} == {
        (r, "landed", run.run_id, len(accounts)) for r, accounts in records.items()}
    landed = Lake(root=str(pipeline_env / "lake")).read("landings").to_pylist()
    assert sorted((x["record_id"], x["product"], x["outcome"], x["run_id"]) for x in landed) == \
        sorted((r, "accounts", "landed", run.run_id) for r in records)

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
