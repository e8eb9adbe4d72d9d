"""What a data engineer sees over `ledgerlake dev` (what `make dev` runs), in headless Chromium:
the stack's own sensors land two new customers' records and build the views, then each page
is screenshot and its state asserted through the webserver's GraphQL, the queries the UI
sends: the checks of the batch's materialization, the freshness check, a run's balance chart,
the payments asset landed empty, a view's lineage. The screenshots land in
LEDGERLAKE_SCREENSHOTS when set (`make screenshots`: docs/screenshots, which the README
shows), else in the test's temporary folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import chromium
from tests.e2e.conftest import dagster_page, demo_env
from tests.e2e.test_webserver import STATES
from tests.postgres import free_port

CHROMIUM = chromium()  # fails the module without a browser to drive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ASSETS = """
{
  assetNodes {
    assetKey { path }
    dependencyKeys { path }
    assetMaterializations(limit: 1) {
      metadataEntries { label ... on MarkdownMetadataEntry { mdStr }
                        ... on IntMetadataEntry { intValue } }
    }
  }
}
"""
LAUNCH = """
mutation($job: String!) {
  launchRun(executionParams: {selector: {repositoryLocationName: "pipeline.definitions",
    repositoryName: "__repository__", jobName: $job}, runConfigData: {}}) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  }
}
"""


def ask(url: str, query: str, **variables) -> dict:
    body = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables},
                      timeout=60).json()
    assert "errors" not in body, body
    return body["data"]


def nodes(url: str, query: str) -> dict[str, dict]:
    return {"/".join(n["assetKey"]["path"]): n for n in ask(url, query)["assetNodes"]}


def metadata(node: dict) -> dict:
    (last,) = node["assetMaterializations"] or [{"metadataEntries": []}]
    return {e["label"]: e.get("mdStr", e.get("intValue")) for e in last["metadataEntries"]}


def checks(url: str) -> dict[tuple[str, str], dict | None]:
    return {(asset, c["name"]): c["executionForLatestMaterialization"]
            for asset, n in nodes(url, STATES).items()
            for c in (n["assetChecksOrError"] or {}).get("checks", [])}


def wait(what: str, ready, log: Path, proc: subprocess.Popen, limit_s: float = 420):
    deadline = time.monotonic() + limit_s
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if got := ready():
                return got
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{what}: not after {limit_s} s\n" + \
            log.read_text()[-3000:]
        time.sleep(2)


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    """`ledgerlake dev --customers 2` in its own home, until its records and views landed."""
    home = tmp_path_factory.mktemp("dev-ui")
    port, log = free_port(), home / "dev.log"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "dev", "--port", str(port),
                             "--customers", "2"], env=demo_env(home / "data"), cwd=home,
                            stdin=subprocess.DEVNULL, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait("the UI", lambda: httpx.get(f"{url}/server_info", timeout=5).is_success, log, proc)
        # the daemon's sensors: the records land, then the views are built over them
        def landed() -> bool:
            got = nodes(url, ASSETS)
            return bool(got["payments"]["assetMaterializations"]) and "](data:image" in (
                metadata(got["warehouse/daily_balances"]).get("summary") or "")

        wait("the records and views", landed, log, proc)
        # the hourly freshness run, launched as the UI's "Materialize" does
        launched = ask(url, LAUNCH, job="freshness_job")["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        wait("the freshness verdicts", lambda: all(
            (e or {}).get("status") == "SUCCEEDED" for (a, c), e in checks(url).items()
            if c == "connected_records_fresh"), log, proc)
        yield url, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def page(dev):
    with dagster_page(dev[0], height=900) as page:
        yield page


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("LEDGERLAKE_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.mark.parametrize("asset, check, shot", [
    ("transactions", "running_balance_reconciles", "ui-checks.png"),
    ("balances", "connected_records_fresh", "ui-freshness.png")])
def test_each_check_shows_the_verdict_on_what_it_judged(dev, page, shots, asset, check, shot):
    """Passed, tied to the materialization it judged: never Skipped (freshness, over a run
    of other records), never missing its target (a verdict logged without its data)."""
    url, _ = dev
    got = checks(url)
    for key in (("accounts", "account_has_record"), (asset, check)):
        assert got[key]["status"] == "SUCCEEDED" and got[key]["evaluation"]["success"], key
        assert got[key]["evaluation"]["targetMaterialization"], key
    page.goto(f"{url}/assets/{asset}?view=checks")
    page.get_by_text(check, exact=True).first.click()
    page.get_by_text("Passed", exact=True).first.wait_for()
    shown = page.inner_text("body")
    assert "Skipped" not in shown and "did not yield" not in shown
    page.screenshot(path=str(shots / shot))


def test_a_run_of_two_records_shows_each_ones_chart(dev, page, shots):
    url, _ = dev
    chart = metadata(nodes(url, ASSETS)["balances"])["daily_balance"]
    assert chart.count("](data:image/png;base64,") == 2, chart[:300]
    page.goto(f"{url}/assets/balances")
    page.locator("tr", has_text="daily_balance").get_by_text("Show Markdown").click()
    image = page.locator("img[src^='data:image/png']").first
    image.wait_for()
    assert image.evaluate("i => i.complete && i.naturalWidth > 100")
    page.screenshot(path=str(shots / "ui-balance-chart.png"))
    page.keyboard.press("Escape")


def test_payments_landed_empty_not_missing(dev, page, shots):
    url, _ = dev
    told = metadata(nodes(url, ASSETS)["payments"])
    assert told["dagster/row_count"] == 0 and told["published"] == 2
    page.goto(f"{url}/assets/payments")
    page.get_by_text("published", exact=True).first.wait_for()
    page.screenshot(path=str(shots / "ui-payments.png"))


def test_a_view_is_an_asset_with_its_lineage(dev, page, shots):
    url, _ = dev
    view = nodes(url, ASSETS)["warehouse/daily_balances"]
    assert {"/".join(k["path"]) for k in view["dependencyKeys"]} == {"balances", "transactions"}
    assert "](data:image/png;base64," in metadata(view)["summary"]
    page.goto(f"{url}/assets/warehouse/daily_balances?view=lineage")
    page.get_by_text("transactions", exact=True).first.wait_for()
    page.get_by_text("balances", exact=True).first.wait_for()
    page.wait_for_function("() => !document.body.innerText.includes('Loading')")
    page.screenshot(path=str(shots / "ui-view-lineage.png"))
