"""A run launched by hand as the Launchpad opens it (the default config: no records) fails at
once, saying how to name records, and lands nothing: no green run that fetched nothing, no
check left Skipped, no "did not yield expected outputs"."""

from __future__ import annotations

import dagster as dg

from assets.balances import balances
from assets.batch import NAME_THEM, Batch
from assets.transactions import transactions
from pipeline.freshness import freshness_checks
from pipeline.jobs import refresh_job
from resources.client.resource import ConnectionClient
from resources.inbox.resource import InboxResource
from resources.lake import Lake
from tests.conftest import connected


def test_a_refresh_launched_with_no_records_refuses_and_says_how(tmp_path):
    # the job leaves out the freshness checks: they are the definitions' too
    defs = dg.Definitions(assets=[balances, transactions], asset_checks=freshness_checks,
                          jobs=[refresh_job], resources={
        # never called: nothing is fetched (port 9 on loopback answers nobody)
        "client": ConnectionClient(base_url="http://127.0.0.1:9", secret_key="sk_test_x",
                                   environment="sandbox"),
        "lake": Lake(root=str(tmp_path / "lake")),
        "inbox": InboxResource(path=connected(tmp_path / "inbox.sqlite3", ["r1"])),
        "batch": Batch()})
    with dg.DagsterInstance.ephemeral() as instance:
        out = defs.resolve_job_def("refresh_job").execute_in_process(
            instance=instance, raise_on_error=False)
        assert not out.success
        failures = [e for e in out.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
        assert {e.step_key for e in failures} == {"balances", "transactions"}
        assert all(NAME_THEM in e.event_specific_data.error.message for e in failures)
        kinds = {e.event_type for e in out.all_events}
        assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in kinds  # said once, not retried
        assert dg.DagsterEventType.ASSET_MATERIALIZATION not in kinds
        assert dg.DagsterEventType.ASSET_CHECK_EVALUATION not in kinds  # no verdict, no skip
        logs = " ".join(str(e.message) for e in out.all_events)
        assert "expected outputs" not in logs
    assert not (tmp_path / "lake" / "transactions").exists()
    assert "resources: batch: config: records: [1, 2]" in NAME_THEM
    assert "ledgerlake status" in refresh_job.description and "Launch all" in \
        refresh_job.description
