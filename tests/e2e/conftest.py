"""The end-to-end tests' shared, costly parts, each made once a session: a demo-sized ingest
(`ledgerlake demo`, ~25 s) and the Dagster webserver on workspace.yaml over it (~20 s to
load the code location)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from pipeline.local import stop_process
from tests.postgres import free_port

REPO = Path(__file__).resolve().parents[2]
DEMO_CUSTOMERS = 4

LOADED = """
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


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd:
            found.append(cmd)
    return found


@dataclass
class Demo:
    home: Path
    env: dict[str, str]  # what `ledgerlake sql`, `report` and the webserver run under
    out: subprocess.CompletedProcess
    # processes naming its home once it returned (read then: the webserver fixture's own code
    # server, which outlives the webserver by a heartbeat, names the home too)
    left_running: list[str]


def demo_env(home: Path) -> dict[str, str]:
    env = {**os.environ, "LEDGERLAKE_HOME": str(home)}
    for var in ("LEDGERLAKE_SECRET_KEY", "DAGSTER_HOME", "LEDGERLAKE_INBOX", "LEDGERLAKE_LAKE",
                "LEDGERLAKE_WAREHOUSE", "LEDGERLAKE_API_URL"):
        env.pop(var, None)
    return env


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Demo:
    """`ledgerlake demo --customers 4` run once, as a user runs it; its data stays."""
    home = tmp_path_factory.mktemp("e2e") / "demo-home"
    env = demo_env(home)
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "demo", "--customers",
                          str(DEMO_CUSTOMERS)], env=env, capture_output=True, text=True,
                         timeout=600)
    return Demo(home, env, out, processes_mentioning(str(home)))


@dataclass
class Webserver:
    url: str
    body: dict  # the workspace as GraphQL answered once the location settled


@pytest.fixture(scope="session")
def webserver(demo) -> Iterator[Webserver]:
    """dagster-webserver on workspace.yaml, over the demo's Dagster instance and data."""
    assert demo.out.returncode == 0, demo.out.stdout + demo.out.stderr
    port = free_port()
    env = {**demo.env, "DAGSTER_HOME": str(demo.home / "dagster")}
    log_path = demo.home.parent / "webserver.log"
    log = open(log_path, "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-webserver")), "-w", "workspace.yaml",
         "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"{url}/server_info", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "webserver did not come up"
            time.sleep(0.5)
        # the location may still be loading right after start: wait until it settles
        while True:
            body = httpx.post(f"{url}/graphql", json={"query": LOADED}, timeout=60).json()
            entries = body["data"]["workspaceOrError"]["locationEntries"]
            if all(e["locationOrLoadError"] is not None for e in entries):
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.5)
        yield Webserver(url, body)
    finally:
        stop_process(proc, timeout_s=30)
        log.close()


@contextmanager
def dagster_page(url: str, height: int = 1000):
    """A page of headless Chromium (tests/conftest.py chromium) on the Dagster UI at `url`,
    its first-visit dialog dismissed."""
    from playwright.sync_api import sync_playwright

    from tests.conftest import chromium

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_context(viewport={"width": 1400, "height": height}).new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{url}/assets")
            skip = page.get_by_role("button", name="Skip")
            try:  # "Join the Dagster community": shown once per browser profile
                skip.wait_for(state="visible", timeout=10_000)
                skip.click()
            except Exception:
                pass
            yield page
        finally:
            browser.close()
