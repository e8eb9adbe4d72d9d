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
    assert {"accounts", "warehouse"} <= assets
    assert "inbox_sensor" in {s["name"] for s in repo["sensors"]}
    assert {"ingest_job", "refresh_job", "warehouse_job", "freshness_job"} <= {
        j["name"] for j in repo["jobs"]}
