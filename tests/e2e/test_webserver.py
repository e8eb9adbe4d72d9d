"""The Dagster webserver, started on workspace.yaml, really loads the code location.

`loadStatus` says LOADED even for broken code, so the test asks for `locationOrLoadError`
and requires a RepositoryLocation holding our assets, sensor and jobs. The webserver is the
session's (tests/e2e/conftest.py), over the demo's data, shared with the browser tests.
"""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_webserver_loads_code_location(webserver):
    body = webserver.body
    entries = body["data"]["workspaceOrError"]["locationEntries"]
    assert body["data"]["workspaceOrError"]["__typename"] == "Workspace", body
    assert entries, body
    for entry in entries:
        loc = entry["locationOrLoadError"]
        assert loc["__typename"] == "RepositoryLocation", loc
    repo = entries[0]["locationOrLoadError"]["repositories"][0]
    assets = {"/".join(n["assetKey"]["path"]) for n in repo["assetNodes"]}
    assert {"accounts", "warehouse/daily_balances"} <= assets
    assert "inbox_sensor" in {s["name"] for s in repo["sensors"]}
    assert {"ingest_job", "refresh_job", "warehouse_job", "freshness_job"} <= {
        j["name"] for j in repo["jobs"]}


STATES = """
{
  assetNodes {
    assetKey { path }
    assetMaterializations(limit: 1) {
      runId metadataEntries { label ... on IntMetadataEntry { intValue } }
    }
    assetChecksOrError {
      ... on AssetChecks {
        checks {
          name
          executionForLatestMaterialization {
            status
            evaluation { success targetMaterialization { runId } }
          }
        }
      }
    }
  }
}
"""


@pytest.mark.slow
def test_the_ui_shows_checks_freshness_and_payments_as_they_are(webserver):
    """What the asset pages ask the webserver after the demo: each product's checks and
    freshness evaluated (never skipped), each check's verdict tied to the materialization
    it judged, and payments landed empty (none made), not missing."""
    import httpx

    body = httpx.post(f"{webserver.url}/graphql", json={"query": STATES}, timeout=60).json()
    nodes = {"/".join(n["assetKey"]["path"]): n for n in body["data"]["assetNodes"]}
    checks = {(asset, c["name"]): c["executionForLatestMaterialization"]
              for asset, n in nodes.items()
              for c in (n["assetChecksOrError"] or {}).get("checks", [])}
    assert {("accounts", "account_has_record"), ("transactions", "running_balance_reconciles"),
            ("balances", "connected_records_fresh"),
            ("transactions", "connected_records_fresh")} <= set(checks)
    for key, execution in checks.items():
        assert execution is not None, key
        assert execution["status"] == "SUCCEEDED", (key, execution)
        assert execution["evaluation"]["success"], key
    for key in (("accounts", "account_has_record"),
                ("transactions", "running_balance_reconciles")):  # judged with their data
        judged = checks[key]["evaluation"]["targetMaterialization"]
        assert judged and judged["runId"] == nodes[key[0]]["assetMaterializations"][0]["runId"]
    (payments,) = nodes["payments"]["assetMaterializations"]
    counts = {e["label"]: e.get("intValue") for e in payments["metadataEntries"]}
    assert counts["dagster/row_count"] == 0 and counts["published"] >= 1
