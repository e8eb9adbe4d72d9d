"""The Dagster webserver, started on workspace.yaml, really loads the code location.

`loadStatus` says LOADED even for broken code, so the test asks for `locationOrLoadError`
and requires a RepositoryLocation holding our assets, sensor and jobs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipeline.local import stop_process

REPO = Path(__file__).resolve().parents[2]

QUERY = """
{
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError {
          __typename
          ... on RepositoryLocation {
            repositories {
              name
              assetNodes { assetKey { path } }
              sensors { name }
              jobs { name }
            }
          }
          ... on PythonError { message }
        }
      }
    }
  }
}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_webserver_loads_code_location(tmp_path):
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "LEDGERLAKE_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    log = open(tmp_path / "webserver.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-webserver")), "-w", "workspace.yaml",
         "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (tmp_path / "webserver.log").read_text()
            try:
                if httpx.get(f"{url}/server_info", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "webserver did not come up"
            time.sleep(0.5)
        # the location may still be loading right after start: wait until it settles
        while True:
            body = httpx.post(f"{url}/graphql", json={"query": QUERY}, timeout=60).json()
            entries = body["data"]["workspaceOrError"]["locationEntries"]
            if all(e["locationOrLoadError"] is not None for e in entries):
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.5)
    finally:
        stop_process(proc, timeout_s=30)
        log.close()

    assert body["data"]["workspaceOrError"]["__typename"] == "Workspace", body
    assert entries, body
    for entry in entries:
        loc = entry["locationOrLoadError"]
        assert loc["__typename"] == "RepositoryLocation", loc
    repo = entries[0]["locationOrLoadError"]["repositories"][0]
    assets = {"/".join(n["assetKey"]["path"]) for n in repo["assetNodes"]}
    assert {"accounts", "warehouse"} <= assets
    assert "inbox_sensor" in {s["name"] for s in repo["sensors"]}
    assert {"ingest_job", "refresh_job", "warehouse_job"} <= {j["name"] for j in repo["jobs"]}
